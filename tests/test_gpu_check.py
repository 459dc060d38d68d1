"""bin/gpu-check stays runnable without a GPU to try it on: its plan (``--dry-run``) names tests
that exist and are selected, experiment files that exist, ``distnet`` and ``benchmarks/run.py``
options their parsers accept, and the names its helper scripts import. Nothing is trained here."""
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bin" / "gpu-check"


def load_script():
    """bin/gpu-check as a module (its name has no .py, so a loader is given explicitly)."""
    loader = importlib.machinery.SourceFileLoader("gpu_check", str(SCRIPT))
    spec = importlib.util.spec_from_loader("gpu_check", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def gc():
    return load_script()


def plan(gc, tmp_path, cpu):
    args = ["--out", str(tmp_path / "out")] + (["--cpu"] if cpu else [])
    return {s.name: s for s in gc.build_plan(gc.parse_args(args), {}, str(tmp_path / "bench"))}


# Collects each selection in one interpreter: the test modules are imported once, not per selection
# (selections that share a module name in different folders need one interpreter each).
COUNT = r"""
import json, sys
import pytest

class Count:
    def pytest_collection_finish(self, session):
        self.n = len(session.items)   # after -k deselected

for args in json.loads(sys.argv[1]):
    c = Count()
    pytest.main(["--collect-only", "-qq", "-p", "no:cacheprovider", *args], plugins=[c])
    print("COUNT", getattr(c, "n", -1))
"""


def collected(selections):
    """How many tests ``pytest --collect-only args`` selects, for each ``args`` of ``selections``."""
    p = subprocess.run([sys.executable, "-c", COUNT, json.dumps(selections)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    counts = [int(line.split()[1]) for line in p.stdout.splitlines() if line.startswith("COUNT ")]
    assert len(counts) == len(selections), p.stdout[-2000:] + p.stderr[-2000:]
    return counts


def after(argv, marker):
    return argv[argv.index(marker) + 1:]


@pytest.mark.parametrize("cpu", [False, True], ids=["gpu", "cpu"])
def test_dry_run_lists_every_step_and_runs_nothing(tmp_path, cpu, gc):
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(out)] + (["--cpu"] if cpu else []),
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    for name in plan(gc, tmp_path, cpu):
        assert f"] {name} (" in p.stdout
    assert "install_pinned" in p.stdout and "mpich" in p.stdout
    assert ("nvidia_smi" in p.stdout) != cpu
    assert not out.exists()


@pytest.mark.parametrize("cpu", [False, True], ids=["gpu", "cpu"])
def test_every_file_the_plan_names_exists(tmp_path, cpu, gc):
    steps = plan(gc, tmp_path, cpu)
    named = [a for s in steps.values() for a in s.argv
             if a.endswith((".py", ".yaml")) or a.startswith(("tests/", "experiments/", "bin/"))]
    assert any(a.endswith("_gpu.yaml") for a in named) != cpu
    for a in named:
        assert (ROOT / a).exists(), a


def test_the_test_selections_select_tests(tmp_path, gc):
    gpu, cpu = plan(gc, tmp_path, cpu=False), plan(gc, tmp_path, cpu=True)
    unit = [s["pytest_unit"].argv for s in (gpu, cpu)]
    n_gpu, n_cpu = collected([["tests/unit", "-k", argv[argv.index("-k") + 1]] for argv in unit])
    # apart: tests/unit and tests/mpi both have a test_neon_files module (no packages)
    assert cpu["mpi_neon_files_n4"].argv == gpu["mpi_neon_files_n4"].argv   # the same files on 4 ranks
    n_mpi, = collected([after(gpu["mpi_neon_files_n4"].argv, "-rfEs")])
    assert n_gpu > 100 and n_cpu > 100 and n_mpi > 0, (n_gpu, n_cpu, n_mpi)


def resolve(group, args):
    """The innermost command ``distnet args`` names, with its arguments parsed (click's usage
    errors propagate)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # click 8.2's protected_args
        ctx = group.make_context("distnet", list(args))
        while isinstance(ctx.command, click.Group):
            rest = list(getattr(ctx, "protected_args", [])) + ctx.args
            name, cmd, rest = ctx.command.resolve_command(ctx, rest)
            ctx = cmd.make_context(name, rest, parent=ctx)
    return ctx


@pytest.mark.parametrize("cpu", [False, True], ids=["gpu", "cpu"])
def test_distnet_commands_parse(tmp_path, cpu, gc):
    from distnet.cli.main import main
    calls = [s.argv[s.argv.index("distnet") + 1:] for s in plan(gc, tmp_path, cpu).values()
             if s.argv[1:3] == ["-m", "distnet"]]
    assert any(c[0] == "compare" for c in calls)
    for args in calls:
        ctx = resolve(main, args)
        if args[0] == "compare":
            assert ctx.params["nranks"] in (1, 4)


@pytest.mark.parametrize("cpu", [False, True], ids=["gpu", "cpu"])
def test_benchmark_options_are_accepted_by_run_py(tmp_path, cpu, gc, monkeypatch):
    import benchmarks.run as run
    benches = [s for s in plan(gc, tmp_path, cpu).values() if s.name.startswith("bench_")]
    assert benches
    for s in benches:
        args = after(s.argv, "bin/gpu-check.d/run_bench.py")
        workloads = [w for w in args[args.index("--workloads") + 1].split(",") if w]
        assert set(workloads) <= set(run.SINGLE), workloads
        # --preflight with the CPU backend: argparse checks every option (a usage error exits
        # 2), then run.py returns without measuring anything
        monkeypatch.setattr(sys, "argv", ["benchmarks/run.py", *args, "--backend", "cpu", "--preflight"])
        assert run.main() is None, s.name


def test_helper_scripts_find_what_they_import():
    import benchmarks.run as run
    import benchmarks.workloads as workloads
    from distnet.comm import Topology
    from distnet.testing.devicelike import DeviceLike
    assert callable(run._env) and callable(run.main)   # run_bench.py wraps both
    assert "PYTHONPATH" in run._env(1)
    assert callable(workloads.gpu_backend) and hasattr(workloads.DistnetRun, "step")
    assert callable(Topology.serial) and callable(DeviceLike)
    for f in (ROOT / "bin" / "gpu-check.d").glob("*.py"):
        compile(f.read_text(), str(f), "exec")


def test_install_asks_only_for_what_is_missing(tmp_path, gc):
    everything = {k: True for k in ("mpi", "mlxtend", "pytest_timeout", "xdist", "cupy", *gc.REQUIRED)}
    (tmp_path / "h5py-3.16.0-cp312-cp312-manylinux_2_28_x86_64.whl").touch()
    (tmp_path / "cupy_cuda13x-14.0.0-cp312-cp312-manylinux2014_x86_64.whl").touch()
    opts = gc.parse_args(["--wheels", str(tmp_path)])
    assert gc.install_steps(opts, everything) == ([], [])
    steps, absent = gc.install_steps(opts, dict(everything, mpi=False, h5py=False, numpy=False, cupy=False))
    pinned, missing = (s.argv for s in steps)
    assert pinned[-2:] == ["mpich", "mpi4py"] and "--ignore-installed" in pinned
    assert missing[-2:] == ["h5py", "cupy_cuda13x"] and absent == ["numpy>=1.22"]
    i = missing.index("--no-index")
    assert missing[i:i + 3] == ["--no-index", "--find-links", str(tmp_path)]
    (online,), absent = gc.install_steps(gc.parse_args([]), dict(everything, cupy=False), cuda_major=13)
    assert online.argv[-1] == "cupy-cuda13x>=13.6" and "--no-index" not in online.argv and absent == []
    assert gc.install_steps(gc.parse_args(["--no-install"]), {}) == ([], [])


@pytest.mark.parametrize("argv", [["--python-version", "3.12"], ["--wheels", "w", "--no-install"],
                                  ["--download", "w", "--python-version", "3"]])
def test_bad_option_combinations_are_usage_errors(argv, gc):
    with pytest.raises(SystemExit) as e:
        gc.parse_args(argv)
    assert e.value.code == 2


def test_download_entry_runs_the_repository_script(tmp_path, gc):
    text = gc.ENTRY.format(dest=".whl")
    assert 'bin/gpu-check "${args[@]}" "$@"' in text and '--wheels "$here"' in text
    p = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert os.access(SCRIPT, os.X_OK)
    if (ROOT / ".git").exists() and shutil.which("git"):   # the folder never gets committed
        assert subprocess.run(["git", "check-ignore", "-q", ".whl/x.whl"], cwd=ROOT).returncode == 0
