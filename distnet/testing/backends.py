"""The array backends every op test runs on, and the stated GPU-vs-CPU agreement tolerance
(pytest is needed only where :func:`make_backend` skips a test).

* ``numpy``: :class:`distnet.backend.Backend`, the CPU reference.
* ``devicelike``: :class:`distnet.testing.devicelike.DeviceLike`, numpy data behind cupy's strict
  host/device separation, so the device code paths run (and are checked) on any machine.
* ``cupy``: :class:`distnet.backend.GPU`; :func:`make_backend` skips the test (with the
  ConfigError's message) where cupy or a GPU is missing.

Tests draw inputs with numpy, move them with ``backend.asarray``, run the op on the backend,
bring results back with ``backend.to_host`` and compare on the host.
"""
import numpy as np

from ..backend import GPU, Backend
from ..errors import ConfigError
from .devicelike import DeviceLike

BACKENDS = ("numpy", "devicelike", "cupy")
#: The backends that are not the numpy reference.
DEVICE_BACKENDS = BACKENDS[1:]

#: How closely a device backend's result must match numpy's for the same inputs (keyword
#: arguments of ``numpy.testing.assert_allclose``; see :func:`assert_agree`).
#:
#: The two backends compute the same formulas; they differ only in the order of floating-point
#: sums (cuBLAS / cuDNN-style GEMM blocking vs OpenBLAS, tree reductions vs sequential ones,
#: im2col vs the numpy-only flat-shift conv kernel). Two orders of an ``n``-term sum differ by at
#: most ~``2 n u sum|terms|`` (``u`` = unit roundoff: 1.1e-16 in float64, 6e-8 in float32) and in
#: practice by ~``sqrt(n) u`` times the partial sums. For the test sizes (``n`` <= ~2000, O(1)
#: data) that is < 1e-12 relative in float64 and < 1e-5 relative in float32, so:
#:
#: * float64: ``rtol=1e-10`` (two orders of magnitude of margin), ``atol=1e-12``;
#: * float32: ``rtol=1e-4``, ``atol=1e-5`` (also covers the differently rounded ``exp``/``log``
#:   of CUDA's libm, a few ulp). cupy does not use TF32 for float32 GEMMs unless
#:   ``CUPY_TF32=1`` is set; with TF32 (10-bit mantissa) no such tolerance would hold.
#:
#: ``atol`` applies to values that cancel to ~0; :func:`assert_agree` scales it by the largest
#: magnitude of the expected array (rounding errors scale with the terms, not with the result).
AGREEMENT = {
    "float64": dict(rtol=1e-10, atol=1e-12),
    "float32": dict(rtol=1e-4, atol=1e-5),
}


def make_backend(name, dtype="float64", rng_seed=0):
    """The backend called ``name`` (one of :data:`BACKENDS`) with that dtype and seed."""
    if name == "numpy":
        return Backend(rng_seed=rng_seed, dtype=dtype)
    if name == "devicelike":
        return DeviceLike(rng_seed=rng_seed, dtype=dtype)
    if name == "cupy":
        try:
            return GPU(rng_seed=rng_seed, dtype=dtype)
        except ConfigError as e:
            import pytest
            pytest.skip(str(e))
    raise ValueError(f"unknown backend {name!r}; one of {BACKENDS}")


def assert_agree(actual, expected, dtype, err_msg=""):
    """``actual`` (a device backend's result, on the host) agrees with ``expected`` (numpy's)
    to :data:`AGREEMENT` for ``dtype``, ``atol`` scaled by ``max(1, max|expected|)``."""
    dtype = np.dtype(dtype).name
    tol = dict(AGREEMENT[dtype])
    expected = np.asarray(expected)
    scale = float(np.max(np.abs(expected))) if expected.size else 1.0
    tol["atol"] *= max(1.0, scale)
    actual = np.asarray(actual)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, err_msg=err_msg, **tol)


def to_device(xp, a):
    """Host array ``a`` on the device module ``xp`` with its memory layout kept: a
    batch-innermost ``(B, C, H, W)`` view (``(C, H, W, B)`` memory) stays one, where
    ``xp.asarray`` would make it C-contiguous."""
    if a.ndim == 4 and not a.flags.c_contiguous:
        return xp.asarray(np.ascontiguousarray(a.transpose(1, 2, 3, 0))).transpose(3, 0, 1, 2)
    return xp.asarray(a)
