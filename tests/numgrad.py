"""Central-difference gradients for the op tests (float64)."""
import numpy as np


def numerical_grad(f, x, eps=1e-6):
    """d f(x) / d x for a scalar function ``f`` of the array ``x`` (modified in place, restored)."""
    g = np.zeros_like(x, dtype=np.float64)
    it = np.nditer(x, flags=["multi_index"], op_flags=["readwrite"])
    for _ in it:
        i = it.multi_index
        old = x[i]
        x[i] = old + eps
        fp = f()
        x[i] = old - eps
        fm = f()
        x[i] = old
        g[i] = (fp - fm) / (2 * eps)
    return g


def check_grad(f, x, analytic, eps=1e-6, rtol=1e-6, atol=1e-8):
    """Assert ``analytic`` equals the central-difference gradient of scalar ``f`` at ``x``."""
    num = numerical_grad(f, x, eps)
    np.testing.assert_allclose(analytic, num, rtol=rtol, atol=atol)
