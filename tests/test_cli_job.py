"""The job a command runs in (distnet/cli/job.py), on one process: how each kind of failure ends
the command and what its failure listeners are told (under mpiexec: tests/test_cli*.py)."""
import pytest

from distnet.cli.job import Failure, Job
from distnet.comm.abort import RemoteError
from distnet.errors import ConfigError, DistnetError


def _ended(capsys, body, **kwargs):
    """``(exit code or None, stderr, failures told)`` of ``body(job)`` run inside a Job."""
    told = []
    try:
        with Job(**kwargs) as job:
            job.on_failure(told.append)
            body(job)
    except SystemExit as e:
        return e.code, capsys.readouterr().err, told
    return None, capsys.readouterr().err, told


def _raise(error):
    def body(job):
        raise error
    return body


def test_a_distnet_error_is_one_line_and_its_exit_code(capsys):
    assert _ended(capsys, _raise(ConfigError("bad key"))) == (
        2, "distnet: error: bad key\n", [Failure("ConfigError: bad key", "distnet: error: bad key")])
    code, err, told = _ended(capsys, _raise(DistnetError("no data")))
    assert (code, err) == (1, "distnet: error: no data\n")


def test_another_ranks_failure_names_that_rank():
    failure = RemoteError([(3, "DataError: gone")], exit_code=1)
    told = []
    with pytest.raises(SystemExit):
        with Job() as job:
            job.on_failure(told.append)
            raise failure
    assert told[0].rank == 3 and told[0].error.startswith("RemoteError: failed on 1 other rank(s)")


def test_the_errors_table_tells_its_own_message(capsys):
    table = [(MemoryError, lambda e: (f"out of memory: {e}", 1))]
    assert _ended(capsys, _raise(MemoryError("67 GiB")), errors=table) == (
        1, "distnet: error: out of memory: 67 GiB\n", [Failure("MemoryError: 67 GiB")])


def test_a_bug_is_told_and_goes_on(capsys):
    told = []
    with pytest.raises(KeyError):
        with Job() as job:
            job.on_failure(told.append)
            {}["k"]
    assert told == [Failure("KeyError: 'k'", "KeyError: 'k'")]


def test_ctrl_c_is_one_line_only_with_signal_handlers(capsys):
    from distnet.comm.signals import restore_default_handlers
    with pytest.raises(KeyboardInterrupt):     # no handlers: the host's Ctrl-C
        with Job():
            raise KeyboardInterrupt
    try:
        assert _ended(capsys, _raise(KeyboardInterrupt()), world=True, signals=True) == (
            130, "distnet: interrupted by SIGINT\n",
            [Failure("interrupted by SIGINT", "distnet: interrupted by SIGINT", "interrupted")])
    finally:
        restore_default_handlers()


def test_an_exit_of_the_command_goes_through_untold(capsys):
    from distnet.cli.job import fail
    assert _ended(capsys, lambda job: fail("give an EXPERIMENT file")) == (
        2, "distnet: error: give an EXPERIMENT file\n", [])


def test_success_tells_nothing_and_one_process_is_rank0(capsys):
    seen = []
    assert _ended(capsys, lambda job: seen.append((job.rank0, job.comm, job.collectively(lambda: 7),
                                                   job.bcast("x")))) == (None, "", [])
    assert seen == [(True, None, 7, "x")]


def test_a_one_process_command_refuses_mpiexec(capsys, monkeypatch):
    monkeypatch.setenv("PMI_SIZE", "2")         # what mpiexec tells each rank (MPI itself not started)
    ran = []
    assert _ended(capsys, ran.append, command="plot", one_process=True) == (
        2, "distnet: error: distnet plot runs on one process: run it without mpiexec\n", [])
    assert ran == []
