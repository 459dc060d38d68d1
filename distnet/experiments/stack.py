"""The software stack of a run, for bug reports: ``distnet info`` prints it and every run
directory records it in ``run.json``. The facts come from their owners: GPU facts from
:mod:`distnet.backend` (the only module that imports cupy), MPI facts from
:mod:`distnet.comm.mpi_info` (comm is the only package that imports mpi4py), plugins from the
class registry."""
import platform
import sys

from ..backend import gpu_stack
from ..comm.mpi_info import cuda_aware_mpi, mpi_library, mpi_version
from ..config.registry import plugin_summary


def _version(mod, dist=None):
    """The installed version of module ``mod`` (its distribution ``dist``, default the module's
    name): the package metadata's version, as pip reports it, else the module's own
    ``__version__``. Click 8.2+ serves ``__version__`` only through a deprecated module
    ``__getattr__``, so the metadata comes first."""
    try:
        m = __import__(mod)
    except Exception as e:  # noqa: BLE001 - report anything that stops an import
        return f"not available ({type(e).__name__})"
    from importlib import metadata
    try:
        return metadata.version(dist or mod)
    except metadata.PackageNotFoundError:
        return vars(m).get("__version__", "installed")


#: OpenBLAS kernel families without AVX-512 (``OPENBLAS_CORETYPE`` values, lower case).
_PRE_AVX512 = {"haswell", "zen", "sandybridge", "nehalem", "core2", "penryn", "dunnington",
               "prescott", "atom", "bulldozer", "piledriver", "steamroller", "excavator",
               "barcelona", "opteron", "katmai", "coppermine", "northwood", "banias"}


def _cpu_flags():
    """The CPU's feature flags (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def coretype_note(env=None, flags=None):
    """A warning when ``OPENBLAS_CORETYPE`` holds OpenBLAS to a kernel older than the CPU (an
    AVX2 family such as Haswell on a CPU with AVX-512: half the float32 GEMM speed measured in
    benchmarks/README.md), else ``""``. ``env``/``flags``: for tests (default: this process)."""
    import os
    env = os.environ if env is None else env
    core = str(env.get("OPENBLAS_CORETYPE", "")).strip()
    if not core or core.lower() not in _PRE_AVX512:
        return ""
    if "avx512f" not in (_cpu_flags() if flags is None else flags):
        return ""
    return (f"OPENBLAS_CORETYPE={core} holds OpenBLAS to its {core} kernels on a CPU with AVX-512: "
            f"unset it for OpenBLAS's own choice (up to 2x faster float32 GEMMs)")


def _blas():
    try:
        from threadpoolctl import threadpool_info
        libs = [f"{i['internal_api']} {i.get('version')} ({i.get('architecture')}, {i['num_threads']} threads)"
                for i in threadpool_info() if i.get("user_api") == "blas"]
        if libs:
            note = coretype_note()
            return "; ".join(libs) + (f" -- {note}" if note else "")
    except ImportError:
        pass
    try:
        import numpy as np
        cfg = np.show_config(mode="dicts")
        blas = cfg.get("Build Dependencies", {}).get("blas", {})
        return f"{blas.get('name')} {blas.get('version')}"
    except Exception:  # noqa: BLE001
        return "unknown"


def threads_summary(use_mpi):
    from .threads import threads_summary as summary
    return summary(use_mpi)


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
            ("threads", threads_summary(init_mpi)),
            ("mpi", mpi_version(init_mpi)),
            ("mpi-lib", mpi_library()),
            ("h5py", _version("h5py")),
            ("pyyaml", _version("yaml", "PyYAML")),
            ("click", _version("click")),
            *gpu_stack(probe_gpu),
            ("cuda-mpi", cuda_aware_mpi()),
            ("plugins", plugin_summary())]
