"""General sparse solver: weighted projection onto ``C y = b`` for any sparse constraint set.

    [ W   C^T ] [ y   ]   [ W x ]
    [ C   0   ] [ lam ] = [ b   ]      (KKT system, W = diag(weights), inverse variances)

Redundant constraints make this matrix singular but the system consistent; we factor the
shifted matrix (``-delta I`` in the lower-right block) once with a sparse LU and refine against
the exact KKT residual (proximal-point iteration on ``lam``). Errors along the null space of
``C^T`` never reach ``y``; the others shrink by about ``delta / (delta + mu)`` per step for each
non-zero eigenvalue ``mu`` of ``C W^-1 C^T``, so a few steps reach machine precision. Working
on the augmented system keeps the conditioning of ``C`` (normal equations would square it).
Cost: one sparse factorisation.
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
    max_refine: int = 200,
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
    # augmented (KKT) system, shifted: [[W, C^T], [C, -delta I]]; its conditioning is that of
    # C, not of C W^-1 C^T (normal equations square it), so the answer keeps ~1e-12 accuracy
    delta = 1e-10 * float(w.max())
    K = sp.bmat([[sp.diags(w), M.T], [M, -delta * sp.identity(m)]], format="csc", dtype=np.float64)
    lu = spla.splu(K)
    scale = max(1.0, float(np.max(np.abs(X))), float(np.max(np.abs(rhs_b))))
    Wx = w[:, None] * X.T  # (n, R)
    y = X.T.copy()
    lam = np.zeros((m, X.shape[0]))
    resid = np.inf
    for _ in range(max_refine):
        r1 = Wx - w[:, None] * y - M.T @ lam
        r2 = rhs_b[:, None] - M @ y
        step = lu.solve(np.vstack([r1, r2]))
        y += step[:n]
        lam += step[n:]
        resid = float(np.max(np.abs(M @ y - rhs_b[:, None])))
        if float(np.max(np.abs(step[:n]))) <= 1e-14 * scale:
            break
    if resid > 1e-6 * scale:
        raise ConfigError(
            f"the constraints C y = b have no solution (residual {resid:.3g} after "
            f"{max_refine} refinements); check b and the constraint rows"
        )
    out: FloatArray = y.T
    return out[0] if single else out
