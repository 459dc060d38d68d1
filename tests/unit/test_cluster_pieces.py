"""The pieces of a job that survives a cluster, on one process: which checkpoint ``--resume
auto`` picks, what a preemption signal does in each phase, the refusal of a launch that MPI
splits, the new ``checkpoint`` keys, phase faults, the run directory of a requeued job, the
report of `distnet info` by node, and `verify: full`'s verdict."""
import logging
import os
import signal

import numpy as np
import pytest

from distnet.comm import phase, signals
from distnet.comm.launcher import split_launch_refusal
from distnet.errors import ConfigError, OptionError
from distnet.experiments.base import check_checkpoint_key, signal_numbers
from distnet.experiments.resume import candidates, need_a_place, newest_checkpoint
from distnet.models.checkpoint import write_checkpoint


def _ck(path, epoch, position=None, steps=10):
    entries = [{"name": "W", "layer": "l", "sharded": False, "value": np.ones(3), "velocity": None, "state": {}}]
    write_checkpoint(str(path), entries, epoch, {"steps": steps}, position=position)


def test_resume_auto_takes_the_newest_complete_checkpoint(tmp_path, caplog):
    """Among the {epoch} files: the furthest in training (an epoch's end beats the step
    inside it before; a later step beats the end before it); the best epoch's file is not
    a candidate; a damaged file is skipped with a warning; none: None."""
    pattern = str(tmp_path / "ck_{epoch}.h5")
    assert newest_checkpoint(pattern) is None
    _ck(tmp_path / "ck_0.h5", 0, steps=4)
    _ck(tmp_path / "ck_1.h5", 0, {"epoch": 1, "batch": 2, "costs": [1.0]}, steps=6)
    _ck(tmp_path / "ck_best.h5", 5, steps=99)
    assert newest_checkpoint(pattern) == str(tmp_path / "ck_1.h5")
    _ck(tmp_path / "ck_1.h5", 1, steps=8)       # the end of epoch 1
    (tmp_path / "ck_2.h5").write_bytes(b"not hdf5")
    with caplog.at_level(logging.WARNING):
        assert newest_checkpoint(pattern, log=logging.getLogger("t")) == str(tmp_path / "ck_1.h5")
    assert "resume auto: skipping" in caplog.text and "ck_2.h5" in caplog.text


def test_resume_auto_finds_a_sharded_checkpoint_whose_replacement_was_cut_short(tmp_path):
    """`ck` gone between the two renames of a publication: `ck.old-TOKEN` is the checkpoint."""
    old = tmp_path / "ck.old-abc"
    old.mkdir()
    assert candidates(str(tmp_path / "ck")) == [str(old)]


def test_resume_auto_needs_a_place_to_look():
    need_a_place("runs/job", None)
    need_a_place(None, "ck.h5")
    with pytest.raises(OptionError, match="--resume auto looks for the newest checkpoint"):
        need_a_place(None, None)


@pytest.fixture
def preempting():
    phase.reset()
    signals.preempt_on([signal.SIGUSR1], 30)
    yield
    signals.restore_default_handlers()
    phase.reset()


def test_a_preemption_signal_before_training_ends_at_once(preempting):
    phase.enter("data loading")
    with pytest.raises(signals.Preempted, match="preempted by SIGUSR1: no new checkpoint \\(in data loading\\)"):
        signals._raise_interrupted(signal.SIGUSR1, None)


def test_a_preemption_signal_in_training_asks_for_a_checkpoint_and_a_second_ends_at_once(preempting, capsys):
    phase.enter("training")
    signals._raise_interrupted(signal.SIGUSR1, None)
    assert signals.preemption_requested() == signal.SIGUSR1
    assert capsys.readouterr().err == "distnet: SIGUSR1: a checkpoint after this step, then exit 75 (at most 30 s)\n"
    with pytest.raises(signals.Interrupted) as e:
        signals._raise_interrupted(signal.SIGUSR1, None)
    assert e.value.exit_code == 128 + signal.SIGUSR1


def test_a_preemption_signal_in_the_final_phases_lets_the_run_finish(preempting, capsys):
    phase.enter("final evaluation")
    signals._raise_interrupted(signal.SIGUSR1, None)
    assert "SIGUSR1: finishing the run" in capsys.readouterr().err


def test_a_launch_that_mpi_splits_is_refused():
    step = {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2"}
    hydra = dict(step, PMI_SIZE="2", PMI_RANK="0", MPI_LOCALNRANKS="2")
    assert "a launch inside a launch" in split_launch_refusal(2, [1, 1], hydra)
    srun = dict(step, PMI_SIZE="2", PMI_RANK="0", SLURM_STEP_NUM_TASKS="4")
    assert split_launch_refusal(2, [0, 1], srun).startswith(
        "MPI joined 2 rank(s) from task(s) 0-1 of the srun step's 4 (SLURM_STEP_NUM_TASKS=4): task(s) 2-3 would train")
    assert split_launch_refusal(4, [0, 1, 2, 3], dict(step, SLURM_STEP_NUM_TASKS="4")) is None   # srun alone
    assert split_launch_refusal(8, [0, 0, 0, 0, 1, 1, 1, 1], hydra) is None     # mpiexec with Slurm's proxies
    assert split_launch_refusal(4, [None] * 4, {}) is None                      # no Slurm


@pytest.mark.parametrize("value, words", [
    ({"every_steps": -1}, "checkpoint every_steps must be an integer >= 0"),
    ({"every_minutes": "often"}, "checkpoint every_minutes must be a number >= 0"),
    ({"grace": float("inf")}, "checkpoint grace must be a number >= 0"),
    ({"async": "yes"}, "checkpoint async must be True or False"),
    ({"on_signal": "SIGUSR1"}, "checkpoint on_signal must be a list of signal names"),
    ({"on_signal": ["SIGINT"]}, "'SIGINT' is not a signal a run can answer with a checkpoint"),
])
def test_the_new_checkpoint_keys_are_checked(value, words):
    with pytest.raises(ConfigError, match=words):
        check_checkpoint_key(value)


def test_signal_names_with_or_without_sig():
    assert signal_numbers(["USR1", "sigterm"]) == [signal.SIGUSR1, signal.SIGTERM] and signal_numbers([]) == []


def test_phase_faults_parse_and_are_refused_when_malformed():
    from distnet.faults import parse_phase_fault
    assert parse_phase_fault("2:checkpoint+1:2:stop") == (2, "checkpoint", 2, "stop", 1)
    assert parse_phase_fault("0:data_loading:hang") == (0, "data loading", 1, "hang", 0)
    assert parse_phase_fault("1:0:3") is None
    for bad in ("1:nowhere:stop", "1:checkpoint:go", "x:checkpoint:stop"):
        with pytest.raises(ConfigError, match="DISTNET_FAULT_INJECT"):
            parse_phase_fault(bad)


def test_a_requeued_job_takes_over_its_run_directory(tmp_path):
    """`--resume auto --run-dir D`: the earlier attempt's record goes into `attempts`; a run still
    running there, or another experiment's, is refused."""
    from distnet.experiments.rundir import RunDir, RunDirError, read_info
    first = RunDir.create(str(tmp_path / "job"), "exp.yaml")
    first.start({"yaml": "x", "resolved": "x", "source": "exp.yaml"}, command=["distnet"])
    with pytest.raises(RunDirError, match="still running"):
        RunDir.take_over(str(tmp_path / "job"), "exp.yaml")
    first.info.update(preempted={"signal": "SIGUSR1", "checkpoint": "ck.h5", "where": "after epoch 1"})
    first.finish("preempted")
    with pytest.raises(RunDirError, match="holds a run of exp.yaml, not of other.yaml"):
        RunDir.take_over(str(tmp_path / "job"), "other.yaml")
    second = RunDir.take_over(str(tmp_path / "job"), "exp.yaml")
    info = read_info(os.path.join(second.path, "run.json"))
    assert info["status"] == "starting" and info["attempts"][0]["status"] == "preempted"
    assert info["attempts"][0]["preempted"]["checkpoint"] == "ck.h5"
    assert "--- attempt 2 (resume auto) ---" in open(os.path.join(second.path, "log.txt")).read()


def test_hosts_of_ranks_name_the_host_of_a_failed_rank():
    from distnet.experiments.rundir import host_of_rank, hosts_of_ranks
    hosts = hosts_of_ranks(["a", "a", "b", "b", "a"])
    assert hosts == {"a": "0-1,4", "b": "2-3"}
    assert [host_of_rank(hosts, r) for r in (0, 3, 4, 7)] == ["a", "b", "a", None]


def test_info_report_groups_the_ranks_by_node():
    from distnet.cli.info import report
    rows = [("distnet", "0.1"), ("threads", "2/rank")]
    blocks = [("a", rows), ("a", rows), ("b", [("distnet", "0.1"), ("threads", "1/rank")])]
    assert report(blocks) == ["   distnet: 0.1", "node a: rank(s) 0, 1", "  [rank 0]    threads: 2/rank",
                              "  [rank 1]    threads: 2/rank", "node b: rank(s) 2", "  [rank 2]    threads: 1/rank"]
    assert report(blocks[:1]) == ["   distnet: 0.1", "   threads: 2/rank"]


def test_verify_full_names_the_node_and_the_rows_that_differ():
    from distnet.data.verify import _verdict
    same = {"train labels": 1, "train images rows 0-99": 2}
    every = [("a", same), ("a", {}), ("b", dict(same, **{"train images rows 0-99": 3})), ("b", {})]
    rank, words = _verdict(every, "d.h5")
    assert rank == 2 and words.startswith("d.h5: rank(s) 2, 3 on b read data that differ from rank 0's (verify: "
                                          "full: train images rows 0-99 differ)")
    assert _verdict([("a", same), ("b", same)], "d.h5") is None


def test_serve_from_root_on_one_process():
    from distnet.comm.collect import serve_from_root
    from distnet.comm.serial import SerialComm
    whole = np.arange(12.0).reshape(3, 4)
    into = np.empty((3, 2))
    serve_from_root(SerialComm(), lambda: whole, {0: (slice(None), slice(1, 3))}, into)
    np.testing.assert_array_equal(into, whole[:, 1:3])
