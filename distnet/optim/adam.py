"""Adam and AdamW, in place on one parameter's array (Kingma & Ba, the form of PyTorch's
documentation; ``t`` the 1-based step count)::

    m <- beta1 m + (1 - beta1) g            v <- beta2 v + (1 - beta2) g^2
    w <- w - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)

The moments ``m``, ``v`` are shaped like ``w`` (a shard of a sharded parameter has shard-shaped
moments: the state is sharded like the parameter with no extra rule). Weight decay is L2 into the
gradient (``torch.optim.Adam``, then rescaled by the adaptive denominator) or decoupled
(``torch.optim.AdamW``), as for SGD (:mod:`distnet.optim.sgd`). ``g`` is scratch space and holds
no gradient afterwards: a step allocates nothing the size of ``w``, except the L2 term when no
``scratch`` array is given.
"""
import math

from ..backend import get_array_module
from ..ops import dispatch
from . import kernels
from .sgd import add_l2, decay_weights


def _bias_corrections(step, beta1, beta2):
    """``(1 - beta1^t, 1 - beta2^t)`` of 1-based step ``t``."""
    if step < 1:
        raise ValueError(f"adam_step: step counts from 1, got {step}")
    return 1.0 - beta1 ** step, 1.0 - beta2 ** step


@dispatch.op
def adam_step(w, g, m, v, step, lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0,
              decoupled=False, scratch=None):
    """One Adam step in place; ``m``, ``v`` (first and second moments, zero-initialised,
    shaped like ``w``) are updated; ``step`` is the 1-based count of steps INCLUDING this one.
    ``decoupled=True`` makes it AdamW. ``g`` is scratch afterwards."""
    bc1, bc2 = _bias_corrections(step, beta1, beta2)
    xp = get_array_module(w, g, m, v)
    if decoupled:
        decay_weights(w, lr, weight_decay)
    else:
        add_l2(g, w, weight_decay, scratch)
    m -= g
    m *= beta1
    m += g                                  # m = beta1 m + (1 - beta1) g
    g *= g
    v -= g
    v *= beta2
    v += g                                  # v = beta2 v + (1 - beta2) g^2
    xp.sqrt(v, out=g)
    g *= 1.0 / math.sqrt(bc2)
    g += eps                                # sqrt(v_hat) + eps
    xp.divide(m, g, out=g)
    g *= lr / bc1                           # lr * m_hat / (sqrt(v_hat) + eps)
    w -= g


@adam_step.kernel
def adam_step(w, g, m, v, step, lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0,
              decoupled=False, scratch=None):
    bc1, bc2 = _bias_corrections(step, beta1, beta2)        # one launch, the same roundings
    kernels.adam_step(w, g, m, v, lr, beta1, beta2, eps, weight_decay, decoupled, bc1, bc2)


def adamw_step(w, g, m, v, step, lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, scratch=None):
    """One AdamW step (Adam with decoupled weight decay, PyTorch's default ``weight_decay``
    0.01): :func:`adam_step` with ``decoupled=True``."""
    adam_step(w, g, m, v, step, lr, beta1, beta2, eps, weight_decay, True, scratch)
