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


def _gpu():
    try:
        import cupy
        n = cupy.cuda.runtime.getDeviceCount()
        names = [cupy.cuda.runtime.getDeviceProperties(i)["name"].decode() for i in range(n)]
        return f"cupy {cupy.__version__}; {n} GPU(s): {', '.join(names)}"
    except ImportError:
        return "cupy not installed (CPU only)"
    except Exception as e:  # noqa: BLE001
        return f"cupy installed, no usable GPU ({type(e).__name__})"


def stack_info(init_mpi=True):
    """``[(name, version string)]`` for distnet, Python, numpy + BLAS, MPI, h5py, cupy/GPU.

    ``init_mpi=False`` reads the MPI versions from package metadata unless MPI is already
    running (a one-process run should not start MPI just to report it)."""
    mpi_mod = sys.modules.get("mpi4py.MPI")
    running = mpi_mod is not None and mpi_mod.Is_initialized()
    import distnet
    return [("distnet", distnet.__version__),
            ("python", f"{sys.version.split()[0]} ({platform.platform()})"),
            ("numpy", _version("numpy")),
            ("blas", _blas()),
            ("mpi", _mpi() if init_mpi or running else _mpi_metadata()),
            ("h5py", _version("h5py")),
            ("pyyaml", _version("yaml")),
            ("click", _version("click")),
            ("gpu", _gpu())]
