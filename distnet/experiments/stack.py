"""The software stack of a run, for bug reports: ``distnet info`` prints it and every run
directory records it in ``run.json``. The facts come from their owners: GPU facts from
:mod:`distnet.backend` (the only module that imports cupy), MPI facts from
:mod:`distnet.comm.mpi_info` (comm is the only package that imports mpi4py), plugins from the
class registry."""
import platform
import sys

from ..backend import gpu_stack
from ..comm.mpi_info import cuda_aware_mpi, mpi_version
from ..config.registry import plugin_summary


def _version(mod):
    try:
        m = __import__(mod)
        return vars(m).get("__version__", "installed")
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


def stack_info(init_mpi=True, probe_gpu=None):
    """``[(name, version string)]`` for distnet, Python, numpy + BLAS, MPI, h5py, the GPU
    stack (cupy, CUDA runtime and driver, devices, whether MPI is CUDA-aware) and the installed
    plugins (``distnet.plugins`` entry points: their classes, or why they cannot be loaded).

    ``init_mpi=False`` reads the MPI versions from package metadata unless MPI is already
    running (a one-process run should not start MPI just to report it). ``probe_gpu`` (default:
    ``init_mpi``) False imports cupy only if it already is (a CPU run does not load CUDA to
    record its versions). cupy that is missing or broken, or a broken plugin, is reported,
    never raised."""
    if probe_gpu is None:
        probe_gpu = init_mpi
    from .. import __version__
    return [("distnet", __version__),
            ("python", f"{sys.version.split()[0]} ({platform.platform()})"),
            ("numpy", _version("numpy")),
            ("blas", _blas()),
            ("mpi", mpi_version(init_mpi)),
            ("h5py", _version("h5py")),
            ("pyyaml", _version("yaml")),
            ("click", _version("click")),
            *gpu_stack(probe_gpu),
            ("cuda-mpi", cuda_aware_mpi()),
            ("plugins", plugin_summary())]
