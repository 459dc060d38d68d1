"""Can cupy compute on this GPU? Elementwise and reduction kernels (NVRTC compiles), float32 and
float64 GEMM accuracy against numpy (a float32 error far above 1e-6 means TF32 is on, which
distnet's agreement tolerances do not allow), pinned-memory staging as distnet's host transfers
use it, a boolean-mask assignment (cupy reads a count back: a hidden synchronisation), as_strided.
Exits non-zero at the first failure, so the GPU steps after it are skipped."""
import time

import numpy as np
import cupy as cp

cp.show_config()
t = time.perf_counter()
a = cp.arange(1 << 20, dtype=cp.float32)
print("elementwise + reduction:", float((a * 2 + 1).sum()),
      f"({time.perf_counter() - t:.2f} s incl. NVRTC compiles)")
rng = np.random.RandomState(0)
h = rng.standard_normal((512, 512))
ref = h @ h
for dt in ("float32", "float64"):
    r = cp.asnumpy(cp.asarray(h, dtype=dt) @ cp.asarray(h, dtype=dt))
    err = float(np.abs(r - ref).max() / np.abs(ref).max())
    print(f"matmul {dt}: max rel err {err:.1e}"
          + ("  <-- TF32? (float32 GEMM should be ~1e-6)" if dt == "float32" and err > 1e-4 else ""))
pin = cp.cuda.alloc_pinned_memory(4096)
hb = np.frombuffer(pin, np.float32, 1024)
cp.asnumpy(a[:1024], out=hb, blocking=False)
cp.cuda.get_current_stream().synchronize()
print("pinned staging (asnumpy out=, blocking=False):", hb[:3])
x = cp.zeros(8, cp.float32)
x[x == 0] = 1
print("boolean-mask setitem (a hidden sync):", float(x.sum()))
print("as_strided:", cp.lib.stride_tricks.as_strided(a, (3, 4), (4, 4)).shape)
p = cp.cuda.runtime.getDeviceProperties(0)
name = p["name"].decode() if isinstance(p["name"], bytes) else p["name"]
print("device:", name, f"{p['totalGlobalMem'] / 2**30:.0f} GiB, sm_{p['major']}{p['minor']}; "
      f"cupy {cp.__version__}, runtime {cp.cuda.runtime.runtimeGetVersion()}, driver {cp.cuda.runtime.driverGetVersion()}")
