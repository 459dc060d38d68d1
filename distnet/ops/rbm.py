"""Contrastive divergence (CD-k) for a binary restricted Boltzmann machine, as neon 0.4's
``RBMLayer`` computed it (docs/neon-semantics.md#rbm-and-dbn). Pure array math: no MPI.

Shapes: ``x (B, F)`` visible units, ``W (H, F)`` weights, ``b (H,)`` the weight column of
neon's constant visible unit (neon's ``weights[:, -1]``; its ``nin`` counts that unit), ``u``
uniforms in [0, 1) of shape ``(k, B, H)``, one ``(B, H)`` block per Gibbs step.

neon's chain, with ``v = [x, 1]`` and ``W_ext = [W, b]``:

* positive phase: ``p+ = f(v W_ext^T)``; statistics ``p+^T v``; hidden sample ``s = [p+ > u]``;
* negative phase: ``v- = f(s W_ext)`` (mean-field, *every* column of ``v`` including the
  constant unit, whose reconstruction is ``f(s b)``, not 1); ``p- = f(v- W_ext^T)``;
  statistics ``p-^T v-``;
* for ``k > 1`` (a distnet addition; neon ran k = 1) the negative phase repeats from
  ``s = [p- > u_j]``.

The update is ``W_ext += lr (p+^T v - p-^T v-)``: statistics summed over the batch, not
averaged, and no momentum or weight decay (neon's ``update`` took and ignored them).
"""
from ..backend import get_array_module


def visible_probabilities(s, W, b, act):
    """neon's downward pass ``f(s W_ext)``: ``(x- (B, F), c- (B,))``, the reconstructed visible
    units and the reconstructed constant unit."""
    return act.fprop(s @ W), act.fprop(s @ b)


def hidden_probabilities(x, c, W, b, act):
    """neon's upward pass ``f([x, c] W_ext^T) (B, H)``; ``c (B,)`` is the constant unit's value
    (1 for data, its reconstruction in the negative phase)."""
    return act.fprop(x @ W.T + c.reshape(-1, 1) * b)


def sample(p, u):
    """Binary sample ``[p > u]`` in ``p``'s dtype (neon's ``greater``)."""
    return (p > u).astype(p.dtype)


def cd_statistics(x, W, b, u, act):
    """One CD-k pass over ``x (B, F)``: ``(dW (H, F), db (H,), x_minus (B, F), s_plus (B, H))``
    with ``dW = p+^T x - p-^T x-`` and ``db = sum_rows p+ - p-^T c-`` (the update is
    ``lr *`` these), ``x_minus`` the last reconstruction (for the cost) and ``s_plus`` the first
    hidden sample (a DBN's input to the next machine). Rows are independent: the statistics of
    a batch are the sums of those of its parts (data replicas sum them)."""
    ones = get_array_module(x, W).ones(len(x), dtype=x.dtype)
    p_plus = hidden_probabilities(x, ones, W, b, act)
    dW = p_plus.T @ x
    db = p_plus.sum(axis=0)
    s = s_plus = sample(p_plus, u[0])
    for j in range(len(u)):
        x_minus, c_minus = visible_probabilities(s, W, b, act)
        p_minus = hidden_probabilities(x_minus, c_minus, W, b, act)
        if j + 1 < len(u):
            s = sample(p_minus, u[j + 1])
    dW -= p_minus.T @ x_minus
    db -= p_minus.T @ c_minus
    return dW, db, x_minus, s_plus


def reconstruction_cost(x, x_minus):
    """neon's ``SumSquaredDiffs`` of a batch: ``1/2 sum (x - x-)^2`` (a float)."""
    xp = get_array_module(x, x_minus)
    d = x - x_minus
    return 0.5 * float(xp.sum(d * d, dtype="float64"))
