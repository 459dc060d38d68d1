"""The GPU stack seen from the command line on any machine: `distnet info` without cupy, with a
broken cupy and with a stand-in cupy; the shipped GPU experiments checked completely (stand-in
cupy); `benchmarks/run.sh --backend gpu` refused with one line where there is no GPU.

The stand-ins are tiny packages named ``cupy`` put first on PYTHONPATH of a subprocess; they
shadow a real cupy, so these tests mean the same on a GPU machine."""
import os
import subprocess
import sys

import pytest

from tests.test_cli import NO_GPU, ROOT, is_gpu_experiment

TIMEOUT = 120

BROKEN_CUPY = 'raise ImportError("libcudart.so.12: cannot open shared object file: No such file or directory")\n'

# Enough of cupy for `distnet info` and for distnet.backend.GPU to be built (config checks only).
STANDIN_CUPY = '''
import types
__version__ = "13.9.9"
NDEV = {ndev}


def _count():
    if NDEV == 0:
        raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
    return NDEV


def _props(i):
    return {{"name": b"Stand-in GPU %d" % i, "totalGlobalMem": 80 * 2**30, "major": 9, "minor": 0}}


class Device:
    def __init__(self, i=0):
        self.id = i

    def use(self):
        pass


cuda = types.SimpleNamespace(Device=Device, runtime=types.SimpleNamespace(
    getDeviceCount=_count, runtimeGetVersion=lambda: 12040, driverGetVersion=lambda: 12060,
    getDeviceProperties=_props))
'''


def run(args, cupy_source=None, tmp_path=None, code=None):
    """``python -m distnet ARGS`` (or ``python -c CODE``) with an optional stand-in cupy package."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    paths = [str(ROOT)]
    if cupy_source is not None:
        pkg = tmp_path / "standin" / "cupy"
        pkg.mkdir(parents=True, exist_ok=True)
        (pkg / "__init__.py").write_text(cupy_source)
        paths.insert(0, str(pkg.parent))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "distnet", *args]
    return subprocess.run(["timeout", str(TIMEOUT), *cmd], cwd=ROOT, env=env, capture_output=True, text=True)


def rows(stdout):
    """``distnet info``'s ``name: value`` lines as a dict."""
    return dict(line.strip().split(": ", 1) for line in stdout.splitlines() if ": " in line)


def test_info_without_cupy():
    # sys.modules["cupy"] = None makes cupy absent to find_spec and to import, installed or not
    code = ("import sys; sys.modules['cupy'] = None; sys.argv = ['distnet', 'info']\n"
            "from distnet.cli.main import main; main()")
    proc = run([], code=code)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    info = rows(proc.stdout)
    assert info["gpu"].startswith("cupy not installed (CPU only")
    assert "distnet[gpu-cuda12]" in info["gpu"] and "distnet[gpu-cuda13]" in info["gpu"]
    assert "`nvidia-smi`'s \"CUDA Version\"" in info["gpu"]
    assert "cuda" not in info and "gpus" not in info
    # the MPI library's own answer, or an honest "unknown"
    assert info["cuda-mpi"].split()[0] in ("yes", "no", "unknown")


def test_info_with_broken_cupy(tmp_path):
    proc = run(["info"], BROKEN_CUPY, tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    gpu = rows(proc.stdout)["gpu"]
    assert gpu.startswith("cupy installed") and "cannot be imported: ImportError: libcudart.so.12" in gpu


@pytest.mark.parametrize("ndev", [2, 0])
def test_info_with_standin_cupy(tmp_path, ndev):
    proc = run(["info"], STANDIN_CUPY.format(ndev=ndev), tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    info = rows(proc.stdout)
    assert info["gpu"].startswith("cupy 13.9.9")
    assert info["cuda"] == "runtime 12.4, driver 12.6"
    if ndev:
        assert info["gpus"] == ("2 (0: Stand-in GPU 0 (80.0 GiB, sm_90); "
                                "1: Stand-in GPU 1 (80.0 GiB, sm_90))")
    else:
        assert info["gpus"].startswith("none usable (RuntimeError: cudaErrorNoDevice")


def test_run_record_does_not_import_cupy(tmp_path):
    """A run directory records the stack without importing cupy (a CPU run loads no CUDA)."""
    code = ("import sys\nfrom distnet.cli.info import stack_info\nd = dict(stack_info(init_mpi=False))\n"
            "print(d['gpu']); print('imported' if 'cupy' in sys.modules else 'not imported')")
    proc = run([], "raise RuntimeError('cupy must not be imported')\n", tmp_path, code=code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["cupy installed (no package metadata), not imported by this process",
                                        "not imported"]


GPU_EXPERIMENTS = sorted(p for p in (ROOT / "experiments").glob("*.yaml") if is_gpu_experiment(p))


def test_gpu_experiments_are_shipped():
    assert {p.name for p in GPU_EXPERIMENTS} >= {"mnist_cnn_gpu.yaml", "mnist_cnn_dist_gpu.yaml"}


@pytest.mark.parametrize("path", GPU_EXPERIMENTS, ids=lambda p: p.name)
def test_gpu_experiment_checks_with_standin_cupy(tmp_path, path):
    """Every key, class and shape of a shipped GPU experiment is valid (the backend is built
    with a stand-in cupy, so this needs no GPU)."""
    proc = run(["check", str(path)], STANDIN_CUPY.format(ndev=1), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"{path.relative_to(ROOT)}: OK" in proc.stdout or f"{path}: OK" in proc.stdout


def test_gpu_device_that_does_not_exist_is_a_config_error(tmp_path):
    """``device: 2`` on a node with 2 GPUs: the YAML line of the key and the devices there are."""
    exp = tmp_path / "gpu.yaml"
    text = (ROOT / "experiments" / "mnist_cnn_gpu.yaml").read_text()
    exp.write_text(text.replace("!obj:distnet.backends.GPU {", "!obj:distnet.backends.GPU {device: 2, ", 1))
    assert "device: 2" in exp.read_text()
    proc = run(["check", str(exp)], STANDIN_CUPY.format(ndev=2), tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{exp}:" in proc.stderr and "key 'device'" in proc.stderr
    assert "device 2 does not exist: this node has 2 GPU(s), devices 0 .. 1" in proc.stderr


@pytest.mark.parametrize("path", GPU_EXPERIMENTS, ids=lambda p: p.name)
def test_gpu_experiment_without_cupy_says_so(tmp_path, path):
    # check: the rest of the file is checked with the CPU backend, and one warning says so
    proc = run(["check", str(path)], BROKEN_CUPY, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith(f"distnet: warning: {path}:")   # file:line of the backend
    assert "no usable GPU here: the GPU backend" in proc.stderr and ": OK (" in proc.stdout
    # run: the one-line error that says why
    proc = run(["run", str(path), "--no-run-dir"], BROKEN_CUPY, tmp_path)
    assert proc.returncode == 2 and NO_GPU.search(proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert f"{path}:" in proc.stderr   # file:line of the backend key


def test_gpu_benchmarks_refused_in_one_line_without_cupy(tmp_path):
    """`benchmarks/run.sh --backend gpu` stops before installing or running anything."""
    standin = tmp_path / "standin" / "cupy"
    standin.mkdir(parents=True)
    (standin / "__init__.py").write_text(BROKEN_CUPY)
    env = dict(os.environ, PYTHONPATH=str(standin.parent))
    proc = subprocess.run(["timeout", str(TIMEOUT), "bash", str(ROOT / "benchmarks" / "run.sh"),
                           "--backend", "gpu", "--rounds", "1"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("benchmarks: --backend gpu cannot run here: the GPU backend needs cupy")
