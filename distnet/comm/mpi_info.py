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
    except Exception as e:  # noqa: BLE001 - mpi4py's binary wheel without libmpi: one line of its list
        first = str(e).splitlines()[0] if str(e) else ""
        return (f"not available ({type(e).__name__}: {first}; one process runs without MPI; install "
                "the mpich extra or a site MPI for several)")


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


def _pip_mpich():
    """``(version, prefix)`` of the pip ``mpich`` wheel in this environment, or None."""
    from importlib import metadata
    try:
        dist = metadata.distribution("mpich")
    except metadata.PackageNotFoundError:
        return None
    import os
    return dist.version, os.path.realpath(os.path.join(str(dist.locate_file("")), "..", "..", ".."))


def _loaded_libmpi():
    """The path of the MPI library this process has loaded (``/proc/self/maps``), or None."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                name = path.rsplit("/", 1)[-1]
                if name.startswith(("libmpi.so", "libmpi_abi.so", "libmpich.so", "libmpi_intel")):
                    return path
    except OSError:
        pass
    return None


def pip_mpich_in_use():
    """Whether mpi4py uses (or, MPI not started yet, will load) the MPI library of the pip
    ``mpich`` wheel, the zero-setup default, rather than an MPI the site provides. Before MPI
    starts this is inferred: the wheel is installed and nothing points mpi4py elsewhere
    (``MPI4PY_LIBMPI``, an mpi4py built from source against another MPI)."""
    import os
    wheel = _pip_mpich()
    if wheel is None:
        return False
    if _running():
        lib = _loaded_libmpi()
        return lib is not None and os.path.realpath(lib).startswith(wheel[1] + os.sep)
    if os.environ.get("MPI4PY_LIBMPI"):
        return False
    try:
        import mpi4py
        return not mpi4py.get_config()   # the binary wheel: no build configuration, libmpi found at run time
    except Exception:  # noqa: BLE001
        return False


def mpi_library():
    """``distnet info``'s ``mpi-lib`` row: which MPI library mpi4py uses (its path once MPI is
    running), whether it came from the pip ``mpich`` wheel or the site, and mpi4py's build
    configuration (``mpicc`` of a source build; a binary wheel has none). Never raises."""
    try:
        import mpi4py
        config = mpi4py.get_config()
        built = (f"mpi4py built with {config.get('mpicc') or config}" if config
                 else "mpi4py binary wheel (finds libmpi at run time)")
        wheel = _pip_mpich()
        lib = _loaded_libmpi() if _running() else None
        if pip_mpich_in_use():
            source = f"from the pip mpich {wheel[0]} wheel"
        else:
            source = "the site's MPI (not the pip mpich wheel)"
        return f"{lib + ' ' if lib else ''}{source}; {built}"
    except Exception as e:  # noqa: BLE001
        return f"unknown ({type(e).__name__}: {e})"
