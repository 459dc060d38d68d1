"""An mpiexec of another MPI library than mpi4py's (a system Open MPI's ``mpirun`` in front of
the virtualenv's MPICH): every process starts as a world of one. Each must say so and exit
non-zero, instead of N copies of the whole job training side by side (or a traceback)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from distnet.comm.launcher import launcher_mismatch, launcher_world_size

ROOT = Path(__file__).resolve().parent.parent


def test_launcher_world_size_reads_the_launchers_variables():
    assert launcher_world_size({}) == (1, None)
    assert launcher_world_size({"OMPI_COMM_WORLD_SIZE": "4"}) == (4, "OMPI_COMM_WORLD_SIZE")
    assert launcher_world_size({"PMI_SIZE": "2", "OMPI_COMM_WORLD_SIZE": "4"}) == (2, "PMI_SIZE")
    assert launcher_world_size({"PMI_SIZE": "x"}) == (1, None)


def test_launcher_mismatch_only_when_mpi_sees_one_of_several():
    env = {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "2"}
    assert launcher_mismatch(4, "MPICH", env) is None          # they agree
    assert launcher_mismatch(1, "MPICH", {}) is None            # no launcher: one process
    assert launcher_mismatch(1, "MPICH", {"PMI_SIZE": "1"}) is None
    msg = launcher_mismatch(1, "MPICH Version: 5.0.2", env)
    assert "process 2 of 4 (OMPI_COMM_WORLD_SIZE=4)" in msg and "MPICH Version: 5.0.2" in msg
    assert "mpiexec" in msg


@pytest.mark.parametrize("command", [["run", "experiments/mnist_cnn_dist.yaml", "--no-run-dir"],
                                     ["evaluate", "experiments/mnist_cnn_dist.yaml", "--checkpoint", "none.h5"]])
def test_foreign_mpiexec_is_one_line_and_exit_2(command):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "MPI_LOCAL"))}
    env.update(OMPI_COMM_WORLD_SIZE="4", OMPI_COMM_WORLD_RANK="1")
    proc = subprocess.run(["timeout", "120", sys.executable, "-m", "distnet", *command], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "epoch" not in proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("distnet: error: launched as process 1 of 4 (OMPI_COMM_WORLD_SIZE=4), but MPI "
                               "sees this process alone"), lines


def test_check_under_mpiexec_checks_that_rank_count_once():
    """`mpiexec -n N distnet check` said OK N times, also for an N that `distnet run` refuses."""
    from distnet.comm.launcher import launch_env, mpiexec_path

    def check(n):
        return subprocess.run(["timeout", "120", mpiexec_path(), "-n", str(n), sys.executable, "-m", "distnet",
                               "check", "experiments/mnist_cnn_dist.yaml"], cwd=ROOT, env=launch_env(n),
                              capture_output=True, text=True)
    ok = check(2)
    assert ok.returncode == 0, ok.stderr
    heads = [line for line in ok.stdout.splitlines() if not line.startswith("  ")]
    assert heads == ["experiments/mnist_cnn_dist.yaml: OK (6 layers, input (1, 28, 28), output (10,); "
                     "on these 2 ranks: data 1 x pipe 1 x grid 1x2)"], ok.stdout
    bad = check(5)
    assert bad.returncode == 1 and "OK" not in bad.stdout   # a grid that does not fit the ranks: 1, as run
    errors = bad.stderr.strip().splitlines()
    assert len(errors) == 5 and all("Rank counts that work: 1, 2, 3, 4, 6, 8, 9, 12, 16" in e for e in errors)


def test_show_under_mpiexec_reports_once():
    from distnet.comm.launcher import launch_env, mpiexec_path
    proc = subprocess.run(["timeout", "120", mpiexec_path(), "-n", "2", sys.executable, "-m", "distnet", "show",
                           "experiments/mnist_cnn_dist.yaml", "-n", "4"], cwd=ROOT, env=launch_env(2),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("experiments/mnist_cnn_dist.yaml: 4 rank(s) = data 1 x pipe 1 x grid 2x2") == 1
    assert proc.stdout.count("predicted step:") == 1
