"""Facts about the MPI stack for bug reports (``distnet info``, a run directory's
``run.json``): versions, and whether the MPI library is CUDA-aware. Never raises."""
import sys


def _running():
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and mpi.Is_initialized()


def _mpi_versions():
    try:
        import mpi4py
        from mpi4py import MPI
        lib = MPI.Get_library_version().splitlines()[0].strip()
        return f"mpi4py {mpi4py.__version__}; {lib}; MPI {'.'.join(map(str, MPI.Get_version()))}"
    except Exception as e:  # noqa: BLE001
        return f"not available ({type(e).__name__}: {e})"


def _mpi_metadata():
    """The MPI packages' versions from their installed metadata, without initialising MPI."""
    from importlib import metadata
    parts = []
    for dist in ("mpi4py", "mpich", "openmpi"):
        try:
            parts.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            pass
    return "; ".join(parts + ["(MPI not initialised)"])


def mpi_version(init_mpi=True):
    """mpi4py's, the MPI library's and the MPI standard's versions in one line. With
    ``init_mpi=False`` and MPI not running, the package versions from their metadata instead
    (importing mpi4py.MPI would initialise MPI)."""
    return _mpi_versions() if init_mpi or _running() else _mpi_metadata()


def cuda_aware_mpi():
    """Whether the MPI library says it is CUDA-aware, without touching a GPU.

    Open MPI (>= 2.0), MVAPICH2 (>= 2.3.4) and MPICH (>= 4.1) export
    ``int MPIX_Query_cuda_support(void)`` (1: built with CUDA and enabled at run time), which
    mpi4py does not wrap; it is looked up in the library mpi4py loaded and called only once
    MPI is initialised (Open MPI requires it). Other libraries: ``unknown``."""
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
            return "unknown (MPI not initialised)"
        import ctypes
        fn = getattr(ctypes.CDLL(mpi.__file__), "MPIX_Query_cuda_support", None)
        if fn is None:
            return "unknown (the MPI library has no MPIX_Query_cuda_support)"
        fn.restype, fn.argtypes = ctypes.c_int, []
        v = fn()
        return f"{'yes' if v == 1 else 'no'} (MPIX_Query_cuda_support() = {v})"
    except Exception as e:  # noqa: BLE001 - ctypes cannot open the module, ...
        return f"unknown ({type(e).__name__})"
