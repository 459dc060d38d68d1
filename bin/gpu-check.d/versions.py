"""Print the interpreter, the version and location of every package the GPU check uses, and the
MPI library mpi4py loads (a missing one is printed, not raised: this is a report)."""
import importlib
import sys
import warnings

# click 8.2+ deprecates __version__; the report still wants it
warnings.simplefilter("ignore", DeprecationWarning)

MODULES = ("numpy", "cupy", "torch", "h5py", "mpi4py", "yaml", "click", "threadpoolctl", "pytest",
           "xdist", "pytest_timeout", "mlxtend", "distnet")

print(sys.executable, sys.version.split()[0])
for m in MODULES:
    try:
        mod = importlib.import_module(m)
        print(f"  {m:15s} {getattr(mod, '__version__', '?'):14s} {mod.__file__}")
    except Exception as e:  # noqa: BLE001
        print(f"  {m:15s} MISSING ({type(e).__name__}: {str(e)[:150]})")
try:
    import torch
    print("  torch CUDA:", torch.cuda.is_available(), getattr(torch.version, "cuda", None))
except Exception:  # noqa: BLE001
    pass
try:
    from mpi4py import MPI
    print("  MPI library:", MPI.Get_library_version().splitlines()[0])
except Exception as e:  # noqa: BLE001
    print("  MPI library: FAILED", type(e).__name__, e)
