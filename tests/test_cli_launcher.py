"""Launchers as distnet reads them from the environment: MPICH's, Intel MPI's and Open MPI's
mpiexec, srun with --mpi=pmi2, pmix and none, and an allocation without a job step (salloc).

A launch that MPI does not join into one world (another MPI library's mpiexec in front of the
virtualenv's MPICH, srun without an MPI plugin, PMIx for an MPI that does not speak it) starts
every process as a world of one. Each must say so and exit 2 before writing anything, instead of
N copies of the whole job training side by side, each in its own run directory (or a traceback).
The environments are set by hand, as each launcher sets them for the second of four processes."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from distnet.comm.launcher import detect_launch, launcher_mismatch, launcher_world_size

ROOT = Path(__file__).resolve().parent.parent
_LAUNCH_PREFIXES = ("PMI_", "PMIX_", "OMPI_", "MPI_LOCAL", "SLURM_", "I_MPI_", "HYDRA_")


def _plain_env():
    """This environment without any launcher's variables (the suite may itself run under one)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCH_PREFIXES)}


#: What each launcher sets for the second of four processes (two nodes of two), as their manuals
#: and a look at ``env`` under each say; a job step's Slurm variables come with every srun.
_STEP = {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4", "SLURM_NTASKS": "4",
         "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NODEID": "0"}
LAUNCHES = {
    "mpich": ({"PMI_RANK": "1", "PMI_SIZE": "4", "PMI_FD": "5", "MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "1"},
              "MPICH's mpiexec (Hydra)", 4, 1, "PMI_SIZE"),
    "intel": ({"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "1",
               "I_MPI_ROOT": "/opt/intel/mpi"}, "Intel MPI's mpiexec", 4, 1, "PMI_SIZE"),
    "openmpi": ({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                 "PMIX_RANK": "1", "PMIX_NAMESPACE": "prterun-a-1@1"}, "Open MPI's mpiexec", 4, 1,
                "OMPI_COMM_WORLD_SIZE"),
    "srun-pmi2": ({**_STEP, "PMI_RANK": "1", "PMI_SIZE": "4", "PMI_JOBID": "77.0"},
                  "srun --mpi=pmi2", 4, 1, "PMI_SIZE"),
    "srun-pmix": ({**_STEP, "PMIX_RANK": "1", "PMIX_NAMESPACE": "slurm.pmix.77.0"}, "srun --mpi=pmix", 4, 1,
                  "SLURM_STEP_NUM_TASKS"),
    "srun-none": (dict(_STEP), "srun without an MPI plugin (--mpi=none)", 4, 1, "SLURM_STEP_NUM_TASKS"),
}


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
    assert "Open MPI's mpiexec as process 2 of 4 (OMPI_COMM_WORLD_SIZE=4)" in msg and "MPICH Version: 5.0.2" in msg
    assert "mpiexec" in msg


@pytest.mark.parametrize("kind", sorted(LAUNCHES))
def test_detect_launch_names_each_launcher(kind):
    env, name, size, rank, var = LAUNCHES[kind]
    launch = detect_launch(env)
    assert (launch.name, launch.size, launch.rank, launch.variable) == (name, size, rank, var)
    assert launcher_world_size(env) == (size, var)


def test_no_launch_outside_a_job_step():
    """``salloc -n 4`` (or a batch script) then ``distnet run``: an allocation, not a step of four
    processes; the batch step's id (0xfffffffb) is no srun step either."""
    assert detect_launch({"SLURM_JOB_ID": "77", "SLURM_NTASKS": "4", "SLURM_NPROCS": "4"}) is None
    assert detect_launch({"SLURM_JOB_ID": "77", "SLURM_NTASKS": "4", "SLURM_STEP_ID": "4294967291"}) is None
    assert detect_launch({}) is None
    # a one-task step is a plain process too
    assert launcher_world_size({**_STEP, "SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "1"}) == (1, "SLURM_STEP_NUM_TASKS")


def test_pmix_without_a_size_takes_the_steps():
    env = {**_STEP, "SLURM_STEP_NUM_TASKS": "6", "PMIX_RANK": "5"}
    assert detect_launch(env).size == 6
    assert detect_launch({"PMIX_RANK": "3"}).size == 4      # no Slurm: at least rank + 1


@pytest.mark.parametrize("kind", sorted(LAUNCHES))
def test_mismatch_names_the_launcher_and_its_fix(kind):
    env, name, *_ = LAUNCHES[kind]
    msg = launcher_mismatch(1, "MPICH Version: 5.0.2", env)
    assert msg.startswith(f"launched by {name} as process 1 of 4 ("), msg
    fix = {"srun-none": "srun --mpi=pmi2", "srun-pmix": "srun --mpi=pmi2", "srun-pmi2": "mpi4py built against"}
    assert fix.get(kind, "mpiexec") in msg.split("alone: ", 1)[1]
    assert launcher_mismatch(4, "MPICH", env) is None


@pytest.mark.parametrize("kind", ["intel", "openmpi", "srun-pmi2", "srun-pmix", "srun-none"])
def test_a_launch_mpi_cannot_join_is_refused_before_any_file(kind, tmp_path):
    """Each process of such a launch would train the whole job alone, each in its own run
    directory: every one must stop with one line naming the launcher, exit 2, write nothing."""
    env, name, *_ = LAUNCHES[kind]
    runs = tmp_path / "runs"
    proc = subprocess.run(["timeout", "120", sys.executable, "-m", "distnet", "run",
                           "experiments/mnist_cnn_dist.yaml"], cwd=ROOT,
                          env={**_plain_env(), **env, "DISTNET_RUNS_DIR": str(runs)},
                          capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"distnet: error: launched by {name} as process 1 of 4"), lines
    assert not runs.exists() and "Traceback" not in proc.stderr


def test_a_process_in_an_allocation_runs_alone(tmp_path):
    """``salloc -n 4`` then ``distnet run`` without srun: one plain process (no refusal, one run
    directory), as outside Slurm."""
    from tests.tiny import write_experiments
    cnn = write_experiments(tmp_path)["cnn"]
    runs = tmp_path / "runs"
    proc = subprocess.run(["timeout", "200", sys.executable, "-m", "distnet", "run", "-q", str(cnn),
                           "--set", "model.num_epochs=1", "--no-checkpoint"], cwd=ROOT,
                          env={**_plain_env(), "SLURM_JOB_ID": "77", "SLURM_NTASKS": "4",
                               "DISTNET_RUNS_DIR": str(runs)}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert len(list(runs.iterdir())) == 1


@pytest.mark.parametrize("command", [["run", "experiments/mnist_cnn_dist.yaml", "--no-run-dir"],
                                     ["evaluate", "experiments/mnist_cnn_dist.yaml", "--checkpoint", "none.h5"]])
def test_foreign_mpiexec_is_one_line_and_exit_2(command):
    env = _plain_env()
    env.update(OMPI_COMM_WORLD_SIZE="4", OMPI_COMM_WORLD_RANK="1")
    proc = subprocess.run(["timeout", "120", sys.executable, "-m", "distnet", *command], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "epoch" not in proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("distnet: error: launched by Open MPI's mpiexec as process 1 of 4 "
                               "(OMPI_COMM_WORLD_SIZE=4), but MPI "
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
    # one line per rank (MPICH adds its own "Abort(1) on node ..." lines as the job ends)
    errors = [e for e in bad.stderr.strip().splitlines() if not e.startswith("Abort(")]
    assert len(errors) == 5 and all("Rank counts that work: 1, 2, 3, 4, 6, 8, 9, 12, 16" in e for e in errors)


def test_show_under_mpiexec_reports_once():
    from distnet.comm.launcher import launch_env, mpiexec_path
    proc = subprocess.run(["timeout", "120", mpiexec_path(), "-n", "2", sys.executable, "-m", "distnet", "show",
                           "experiments/mnist_cnn_dist.yaml", "-n", "4"], cwd=ROOT, env=launch_env(2),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("experiments/mnist_cnn_dist.yaml: 4 rank(s) = data 1 x pipe 1 x grid 2x2") == 1
    assert proc.stdout.count("predicted step:") == 1


def test_one_process_needs_no_mpi_library(tmp_path):
    """distnet installed without the mpich extra on a machine without MPI (mpi4py's binary wheel
    finds no libmpi; MPI4PY_LIBMPI pointing nowhere stands for it): a one-process run trains, with
    the numbers of a run that has MPI; `distnet info` says MPI is not available in one line."""
    from tests.tiny import write_experiments
    cnn = write_experiments(tmp_path)["cnn"]
    costs = []
    for extra in ({}, {"MPI4PY_LIBMPI": str(tmp_path / "no" / "libmpi.so")}):
        out = tmp_path / f"m{len(costs)}.jsonl"
        proc = subprocess.run(["timeout", "200", sys.executable, "-m", "distnet", "run", "-q", str(cnn),
                               "--no-run-dir", "--no-checkpoint", "--metrics", str(out)], cwd=ROOT,
                              env={**_plain_env(), **extra}, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        costs.append([line for line in out.read_text().splitlines() if '"cost"' in line])
    strip = [[re.sub(r'"seconds": [\d.e-]+', "", x) for x in c] for c in costs]
    assert len(strip[0]) == 4 and strip[0] == strip[1]
    info = subprocess.run([sys.executable, "-m", "distnet", "info"], cwd=ROOT, capture_output=True, text=True,
                          env={**_plain_env(), "MPI4PY_LIBMPI": str(tmp_path / "no" / "libmpi.so")})
    mpi = [x for x in info.stdout.splitlines() if x.strip().startswith("mpi:")]
    assert len(mpi) == 1 and "not available (RuntimeError: cannot load MPI library" in mpi[0], info.stdout
