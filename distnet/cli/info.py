"""``distnet info``: the software stack, for bug reports."""
import platform
import sys


def _version(mod):
    try:
        m = __import__(mod)
        return getattr(m, "__version__", "installed")
    except Exception as e:  # noqa: BLE001 - report anything that stops an import
        return f"not available ({type(e).__name__})"


def _blas():
    try:
        from threadpoolctl import threadpool_info
        libs = [f"{i['internal_api']} {i.get('version')} ({i.get('architecture')}, {i['num_threads']} threads)"
                for i in threadpool_info() if i.get("user_api") == "blas"]
        if libs:
            return "; ".join(libs)
    except ImportError:
        pass
    try:
        import numpy as np
        cfg = np.show_config(mode="dicts")
        blas = cfg.get("Build Dependencies", {}).get("blas", {})
        return f"{blas.get('name')} {blas.get('version')}"
    except Exception:  # noqa: BLE001
        return "unknown"


def _threads(use_mpi):
    """This rank's thread plan (:mod:`distnet.ops.threads`): the one a run applied, else the
    one it would apply here (over ``MPI.COMM_WORLD`` if ``use_mpi``: collective), and the BLAS
    threads threadpoolctl sees now."""
    try:
        from ..ops.parallel import current_plan
        from ..ops.threads import blas_threads
        plan, applied = current_plan(), True
        if plan is None:
            applied = False
            from ..experiments.threads import plan_threads
            world = None
            if use_mpi:
                from mpi4py import MPI
                world = MPI.COMM_WORLD
            plan = plan_threads(world)
        now = ", ".join(f"{lib} {n}" for lib, n in blas_threads()) or "no BLAS library found"
        text = plan.describe()[len("threads "):]
        return f"{text}; BLAS threads now: {now}" + ("" if applied else " (a run applies the plan)")
    except Exception as e:  # noqa: BLE001 - never let a report fail
        return f"unknown ({type(e).__name__}: {e})"


def _mpi():
    try:
        from mpi4py import MPI
        lib = MPI.Get_library_version().splitlines()[0].strip()
        return f"mpi4py {__import__('mpi4py').__version__}; {lib}; MPI {'.'.join(map(str, MPI.Get_version()))}"
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


def _cupy_distributions():
    """Installed distributions that provide the ``cupy`` package (``cupy-cuda12x 13.3.0``...),
    from their metadata: nothing is imported."""
    from importlib import metadata
    names = []
    try:
        names = metadata.packages_distributions().get("cupy", [])   # Python >= 3.10
    except Exception:  # noqa: BLE001 - Python 3.9, or odd metadata
        pass
    out = []
    for name in dict.fromkeys(names or ("cupy", "cupy-cuda11x", "cupy-cuda12x", "cupy-cuda13x")):
        try:
            out.append(f"{name} {metadata.version(name)}")
        except Exception:  # noqa: BLE001 - PackageNotFoundError, broken metadata
            pass
    return out


def _cuda_version(v):
    """CUDA's integer version (12040) as ``12.4``."""
    return f"{v // 1000}.{v % 1000 // 10}"


def _gpu_rows(probe=True):
    """``[(name, text)]`` about the GPU stack, for bug reports; never raises.

    cupy is looked up first without being imported (``importlib.util.find_spec``), so a machine
    without it pays nothing. With ``probe=False`` cupy is not imported either unless it already
    is (a CPU run records its versions without loading CUDA)."""
    import importlib.util
    try:
        found = sys.modules.get("cupy") is not None or importlib.util.find_spec("cupy") is not None
    except Exception:  # noqa: BLE001 - a broken sys.modules entry or finder
        found = False
    if not found:
        return [("gpu", "cupy not installed (CPU only; `pip install 'distnet[gpu]'` adds it)")]
    dists = ", ".join(_cupy_distributions()) or "no package metadata"
    if not probe and "cupy" not in sys.modules:
        return [("gpu", f"cupy installed ({dists}), not imported by this process")]
    try:
        import cupy
    except Exception as e:  # noqa: BLE001 - ImportError, a CUDA library failing to load, ...
        msg = str(e).splitlines()[0][:200] if str(e) else ""
        return [("gpu", f"cupy installed ({dists}) but cannot be imported: {type(e).__name__}: {msg}")]
    rows = [("gpu", f"cupy {getattr(cupy, '__version__', '?')} ({dists})")]
    rt = cupy.cuda.runtime
    parts = []
    for what, get in (("runtime", rt.runtimeGetVersion), ("driver", rt.driverGetVersion)):
        try:
            v = get()
            parts.append(f"{what} {_cuda_version(v)}" if v else f"{what} none")
        except Exception as e:  # noqa: BLE001 - CUDARuntimeError (no driver, ...)
            parts.append(f"{what} unknown ({type(e).__name__})")
    rows.append(("cuda", ", ".join(parts)))
    try:
        n = rt.getDeviceCount()
        names = []
        for i in range(n):
            p = rt.getDeviceProperties(i)
            name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
            names.append(f"{i}: {name} ({p['totalGlobalMem'] / 2**30:.1f} GiB, "
                         f"sm_{p['major']}{p['minor']})")
        rows.append(("gpus", f"{n}" + (f" ({'; '.join(names)})" if names else "")))
    except Exception as e:  # noqa: BLE001 - cudaErrorNoDevice, cudaErrorInsufficientDriver, ...
        rows.append(("gpus", f"none usable ({type(e).__name__}: {str(e)[:200]})"))
    return rows


def _cuda_aware_mpi():
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


def stack_info(init_mpi=True, probe_gpu=None):
    """``[(name, version string)]`` for distnet, Python, numpy + BLAS, MPI, h5py, and the GPU
    stack (cupy, CUDA runtime and driver, devices, whether MPI is CUDA-aware).

    ``init_mpi=False`` reads the MPI versions from package metadata unless MPI is already
    running (a one-process run should not start MPI just to report it). ``probe_gpu`` (default:
    ``init_mpi``) False imports cupy only if it already is (a CPU run does not load CUDA to
    record its versions). cupy that is missing or broken is reported, never raised."""
    mpi_mod = sys.modules.get("mpi4py.MPI")
    running = mpi_mod is not None and mpi_mod.Is_initialized()
    if probe_gpu is None:
        probe_gpu = init_mpi
    import distnet
    return [("distnet", distnet.__version__),
            ("python", f"{sys.version.split()[0]} ({platform.platform()})"),
            ("numpy", _version("numpy")),
            ("blas", _blas()),
            ("threads", _threads(init_mpi or running)),
            ("mpi", _mpi() if init_mpi or running else _mpi_metadata()),
            ("h5py", _version("h5py")),
            ("pyyaml", _version("yaml")),
            ("click", _version("click")),
            *_gpu_rows(probe_gpu),
            ("cuda-mpi", _cuda_aware_mpi())]
