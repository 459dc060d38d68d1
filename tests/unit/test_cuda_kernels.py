"""The fused CUDA kernels (distnet/ops/cuda): their source compiles for a GPU (nvcc, where
installed), keeps the rules that make the host emulation faithful, and each kernel computes what
the numpy code computes, run as CUDA C on the host (distnet/testing/cuda_emulator.py) through the
device-like module. Kernels of one op family are also tested with their op
(e.g. tests/unit/test_cuda_pooling.py)."""
import importlib
import pkgutil
import re
import shutil
import subprocess

import numpy as np
import pytest

import distnet.ops.cuda
from distnet.ops.cuda.launch import Kernel, strided
from distnet.ops.windows import fold
from distnet.testing import cuda_emulator
from distnet.testing.backends import DEVICE_BACKENDS, make_backend
from distnet.testing.devicelike import xp

for _m in pkgutil.iter_modules(distnet.ops.cuda.__path__):
    importlib.import_module(f"distnet.ops.cuda.{_m.name}")
KERNELS = {k.name: k for k in Kernel.registry}
needs_compiler = pytest.mark.skipif(cuda_emulator.compiler() is None, reason="no C++ compiler")


def test_kernels_are_registered_once_under_their_function_name():
    assert len(KERNELS) == len(Kernel.registry) and KERNELS
    for name, k in KERNELS.items():
        assert re.search(rf'extern "C" __global__ void {name}\(', k.source), name


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_source_keeps_the_rules_of_the_emulation(name):
    """One thread per output element, no atomics, no shared memory or barriers, a grid-stride
    loop: what makes a serial host run mean something. No headers and nothing they define
    (cupy compiles with NVRTC, which has no host headers: nvcc and g++ would accept INFINITY)."""
    src = KERNELS[name].source
    for banned in ("atomic", "__shared__", "__syncthreads", "#include", "printf", "std::",
                   "INFINITY", "NAN", "HUGE_VAL", "FLT_MAX", "DBL_MAX", "M_PI"):
        assert banned not in src, f"{name}: {banned}"
    assert "i += (long long)blockDim.x * gridDim.x" in src or "+= (long long)blockDim.x * gridDim.x" in src


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no CUDA compiler (nvcc)")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_source_compiles_for_a_gpu(name, dtype, tmp_path):
    cu = tmp_path / f"{name}.cu"
    cu.write_text(KERNELS[name].source_for(dtype))
    r = subprocess.run(["nvcc", "-ptx", "-arch=sm_80", "-fmad=false", "-Werror", "all-warnings", str(cu), "-o",
                        str(tmp_path / "k.ptx")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@needs_compiler
def test_a_strided_view_is_refused_unless_the_kernel_takes_its_strides():
    from distnet.ops.cuda.windows import FOLD
    a = xp.zeros((4, 6))[:, ::2]
    with pytest.raises(ValueError, match="not C-contiguous"):
        FOLD[2](1, a, a)
    assert isinstance(strided(a), distnet.ops.cuda.launch.Strided)


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geom", [(2, 3, 7, 8, 3, 3, 1, 1), (3, 2, 9, 9, 2, 3, 2, 1),
                                  (1, 1, 5, 5, 5, 5, 1, 1), (4, 2, 10, 7, 3, 2, 3, 2),
                                  (2, 2, 9, 9, 2, 2, 3, 3)])
@pytest.mark.parametrize("chwn", [False, True])
def test_fold_kernel_equals_the_tap_by_tap_fold_bit_for_bit(backend, geom, dtype, chwn):
    """Same taps, same order: equal bits (on cupy too: the kernel's adds are the fold's adds)."""
    be = device_backend(backend)
    dev = be.xp
    B, C, H, W, fh, fw, sy, sx = geom
    Ho, Wo = (H - fh) // sy + 1, (W - fw) // sx + 1
    rng = np.random.default_rng(sum(geom))
    # conv's layout: (C, fh, fw, Ho, Wo, B) memory read as (B, C, Ho, Wo, fh, fw)
    cols = rng.standard_normal((C, fh, fw, Ho, Wo, B)).astype(dtype).transpose(5, 0, 3, 4, 1, 2)
    want = fold(cols, (B, C, H, W), (sy, sx))
    dcols = dev.asarray(np.ascontiguousarray(cols.transpose(1, 4, 5, 2, 3, 0))).transpose(5, 0, 3, 4, 1, 2)
    out = (dev.full((C, H, W, B), np.nan, dtype=dtype).transpose(3, 0, 1, 2) if chwn
           else dev.full((B, C, H, W), np.nan, dtype=dtype))
    xp.counts.clear()
    got = fold(dcols, (B, C, H, W), (sy, sx), out=out)
    assert got is out
    if dev is xp:
        assert xp.counts["calls"] == 1
    np.testing.assert_array_equal(be.to_host(got), want)


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,fshape,stride", [((2, 3, 13), (3,), (2,)),
                                                 ((2, 2, 7, 6, 9), (3, 2, 3), (2, 1, 3))])
def test_the_window_loop_serves_signals_and_volumes(backend, shape, fshape, stride, dtype):
    """The fold kernel of 1 and 3 spatial axes (generated from the same window loop as the 2-D
    kernels): one launch, the tap-by-tap fold's bits, batch-innermost output memory too."""
    be = device_backend(backend)
    dev, nd = be.xp, len(stride)
    out_shape = tuple((n - f) // s + 1 for n, f, s in zip(shape[2:], fshape, stride))
    cols = np.random.default_rng(5).standard_normal(shape[:2] + out_shape + fshape).astype(dtype)
    want = fold(cols, shape, stride)
    for out in (dev.empty(shape, dtype=dtype),
                dev.empty(shape[1:] + shape[:1], dtype=dtype).transpose((nd + 1,) + tuple(range(nd + 1)))):
        xp.counts.clear()
        got = fold(dev.asarray(cols), shape, stride, out=out)
        if dev is xp:
            assert xp.counts["calls"] == 1
        np.testing.assert_array_equal(be.to_host(got), want)


def device_backend(name):
    """The device backend ``name`` whose arrays take the fused kernels (skips where they cannot:
    no cupy/GPU, or no host compiler for the emulation)."""
    be = make_backend(name)
    if not distnet.ops.cuda.launch.available(be.xp):
        pytest.skip(f"{name} arrays do not take the fused kernels here (no C++ compiler)")
    return be


def test_kernels_can_be_turned_off_and_the_generic_code_runs(monkeypatch):
    monkeypatch.setattr(distnet.ops.cuda.launch, "ENABLED", False)
    assert not distnet.ops.cuda.launch.available(xp)
    cols = np.arange(2 * 1 * 3 * 3 * 2 * 2, dtype=np.float64).reshape(2, 1, 3, 3, 2, 2)
    xp.counts.clear()
    got = fold(xp.asarray(cols), (2, 1, 4, 4), (1, 1))
    assert xp.counts["calls"] > 4     # one per tap, and the zeroing
    np.testing.assert_array_equal(got.get(), fold(cols, (2, 1, 4, 4), (1, 1)))


@needs_compiler
def test_the_emulation_exposes_a_kernel_whose_threads_read_each_others_output():
    """A kernel breaking the one-thread-per-output rule (each item reads the item before it,
    which another thread writes) gives different results from launch to launch, because the
    emulation runs the threads in another order each time: the agreement tests catch it."""
    racy = Kernel("distnet_test_racy", r"""
extern "C" __global__ void distnet_test_racy(const long long n, T* y) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        y[i] = (i ? y[i - 1] : (T)0) + (T)1;
    }
}
""")
    Kernel.registry.remove(racy)
    results = set()
    for _ in range(3):
        y = np.zeros(40)
        cuda_emulator.run(racy, y.size, (y,))
        results.add(y.tobytes())
    assert len(results) > 1


@pytest.mark.parametrize("value,enabled", [("0", False), ("off", False), ("False", False), (" no ", False),
                                           ("1", True), ("", True)])
def test_the_environment_switch_reads_every_spelling_of_off(value, enabled):
    import os
    import subprocess
    import sys
    env = dict(os.environ, DISTNET_CUDA_KERNELS=value)
    r = subprocess.run([sys.executable, "-c", "import distnet.ops.cuda.launch as l; print(l.ENABLED)"],
                       env=env, capture_output=True, text=True, check=True)
    assert r.stdout.strip() == str(enabled)
