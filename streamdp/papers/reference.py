"""Dense reference: the weighted least-squares projection onto ``C y = b``.

Seed 004, Theorem 1 (eq. 7): the optimal consistent release of a noisy vector ``x`` under
public linear constraints ``C y = b`` is ``f(x) = x + C^+ (b - C x)`` with ``C^+`` the
Moore-Penrose inverse. With independent noise of variances ``sigma^2`` the optimal release is
the projection in the inner product ``W = diag(1 / sigma^2)``:

    y = x + W^{-1/2} (C W^{-1/2})^+ (b - C x)

(substitute ``z = W^{1/2} y`` and apply Theorem 1 to ``C W^{-1/2} z = b``). This costs
O(m n min(m, n)) time and O(m n) memory: it is the yardstick for small inputs, never the
production path.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from streamdp.errors import ConfigError

FloatArray = npt.NDArray[np.float64]


def _check_weights(weights: npt.ArrayLike | None, n: int) -> FloatArray:
    if weights is None:
        return np.ones(n)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,):
        raise ConfigError(f"weights have shape {w.shape}, expected ({n},): one per value")
    if not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ConfigError("weights (inverse noise variances) must be finite and > 0")
    return w


def dense_projection(
    values: npt.ArrayLike,
    C: npt.ArrayLike,
    b: npt.ArrayLike | None = None,
    weights: npt.ArrayLike | None = None,
) -> FloatArray:
    """Weighted projection of ``values`` onto ``{y : C y = b}`` by the dense Moore-Penrose formula.

    Args:
        values: noisy values ``x``, shape (n,).
        C: constraint matrix, shape (m, n) (dense or anything ``np.asarray`` accepts).
        b: right-hand side, shape (m,); zeros when omitted.
        weights: inverse noise variances ``1/sigma^2``, shape (n,); all ones when omitted
            (the unweighted Theorem 1 of seed 004).

    Returns:
        The optimal consistent values, shape (n,).
    """
    x = np.asarray(values, dtype=np.float64)
    M = np.asarray(C, dtype=np.float64)
    if x.ndim != 1 or M.ndim != 2 or M.shape[1] != x.shape[0]:
        raise ConfigError(f"values {x.shape} and C {M.shape} do not fit: need (n,) and (m, n)")
    rhs = np.zeros(M.shape[0]) if b is None else np.asarray(b, dtype=np.float64)
    if rhs.shape != (M.shape[0],):
        raise ConfigError(f"b has shape {rhs.shape}, expected ({M.shape[0]},)")
    w = _check_weights(weights, x.shape[0])
    scale = 1.0 / np.sqrt(w)
    Ms = M * scale[None, :]
    correction = np.linalg.pinv(Ms) @ (rhs - M @ x)
    out: FloatArray = x + scale * correction
    return out


def constraint_residual(
    values: npt.ArrayLike, C: npt.ArrayLike, b: npt.ArrayLike | None = None
) -> float:
    """Largest absolute violation ``max |C y - b|`` of the constraints (0 when consistent)."""
    y = np.asarray(values, dtype=np.float64)
    M = np.asarray(C, dtype=np.float64)
    r = M @ y
    if b is not None:
        r = r - np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(r))) if r.size else 0.0
