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


def stack_info():
    """``[(name, version string)]`` for distnet, Python, numpy + BLAS, MPI, h5py, cupy/GPU."""
    import distnet
    return [("distnet", distnet.__version__),
            ("python", f"{sys.version.split()[0]} ({platform.platform()})"),
            ("numpy", _version("numpy")),
            ("blas", _blas()),
            ("mpi", _mpi()),
            ("h5py", _version("h5py")),
            ("pyyaml", _version("yaml")),
            ("click", _version("click")),
            ("gpu", _gpu())]
