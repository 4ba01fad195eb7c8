"""General sparse solver: weighted projection onto ``C y = b`` for any sparse constraint set.

    y = x - W^{-1} C^T lam,      (C W^{-1} C^T) lam = C x - b,

with ``W = diag(weights)`` (per-value inverse noise variances). Redundant constraints make the
normal matrix ``S = C W^{-1} C^T`` singular but the system consistent; we factor the shifted
matrix ``S + delta I`` once (sparse LU) and refine ``lam <- lam + (S + delta I)^{-1}(r - S lam)``
(proximal-point / iterative refinement). Errors along the null space of ``S`` (= of ``C^T``)
never reach ``y``; the others shrink by ``delta / (delta + mu)`` per step for every non-zero
eigenvalue ``mu``, so a few steps reach machine precision. Cost: one sparse factorisation.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from streamdp.errors import ConfigError

FloatArray = npt.NDArray[np.float64]


def sparse_projection(
    values: npt.ArrayLike,
    C: sp.spmatrix | sp.sparray,
    b: npt.ArrayLike | None = None,
    weights: npt.ArrayLike | None = None,
    *,
    max_refine: int = 50,
) -> FloatArray:
    """Weighted least-squares projection of ``values`` onto ``{y : C y = b}``.

    Args:
        values: shape (n,) or (R, n) (R independent vectors under the same constraints).
        C: sparse constraint matrix, shape (m, n); redundant rows are fine.
        b: right-hand side, shape (m,); zero when omitted.
        weights: per-value inverse noise variances, shape (n,); ones when omitted.
        max_refine: most refinement steps.

    Returns:
        The projected values, shape like ``values``.

    Raises:
        ConfigError: bad shapes or weights, or constraints that no vector satisfies.
    """
    x = np.asarray(values, dtype=np.float64)
    M = sp.csr_matrix(C, dtype=np.float64)
    m, n = M.shape
    single = x.ndim == 1
    X = x[None, :] if single else x
    if X.ndim != 2 or X.shape[1] != n:
        raise ConfigError(f"values have shape {x.shape}; expected (n,) or (R, n) with n = {n}")
    rhs_b = np.zeros(m) if b is None else np.asarray(b, dtype=np.float64)
    if rhs_b.shape != (m,):
        raise ConfigError(f"b has shape {rhs_b.shape}, expected ({m},)")
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (n,) or np.any(w <= 0) or not np.all(np.isfinite(w)):
        raise ConfigError(f"weights must be {n} finite values > 0 (inverse noise variances)")
    if m == 0:
        return x.copy()
    inv_w = 1.0 / w
    MW = M.multiply(inv_w[None, :]).tocsr()
    S = (MW @ M.T).tocsc()
    diag = S.diagonal()
    top = float(diag.max()) if diag.size else 0.0
    delta = 1e-9 * top if top > 0 else 1.0
    lu = spla.splu((S + delta * sp.identity(m, format="csc")).tocsc())
    r = (M @ X.T) - rhs_b[:, None]  # (m, R)
    lam = np.zeros_like(r)
    scale = max(1.0, float(np.max(np.abs(X))), float(np.max(np.abs(rhs_b))) if m else 1.0)
    y = X.T.copy()
    for _ in range(max_refine):
        lam += lu.solve(r - S @ lam)
        y = X.T - (MW.T @ lam)
        resid = float(np.max(np.abs(M @ y - rhs_b[:, None])))
        if resid <= 1e-13 * scale * max(1.0, np.sqrt(n)):
            break
    else:
        if resid > 1e-6 * scale:
            raise ConfigError(
                f"the constraints C y = b have no solution (residual {resid:.3g} after "
                f"{max_refine} refinements); check b and the constraint rows"
            )
    out: FloatArray = y.T
    return out[0] if single else out
