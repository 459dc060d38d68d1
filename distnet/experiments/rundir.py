"""Run directories: every ``distnet run`` leaves a record of itself (written by world rank 0).

Default location ``runs/<experiment stem>-<YYYYmmdd-HHMMSS>`` (under ``$DISTNET_RUNS_DIR``
instead of ``runs`` when that is set; ``-2``, ``-3``, ... if the name is taken), or the
``--run-dir`` given. Contents::

    experiment.yaml   the experiment file as given (a copy of its text)
    resolved.yaml     the experiment with the command-line overrides applied (runnable)
    run.json          command, overrides, resume source, topology (size, grid, data, pipe),
                      versions (``distnet info``), status (see below), start and end times,
                      timings (setup, restore, data, train, eval, total seconds), the checkpoint
                      path, the host and pid of rank 0 (``host``, ``pid``, ``pid_start``); the
                      checkpoint policy's ``stop``, ``best_epoch``, ``checkpoints``,
                      ``best_checkpoint`` (:mod:`~distnet.experiments.policy`)
    metrics.jsonl     one JSON line per epoch: epoch, cost, seconds (wall time of the epoch),
                      the metrics of every evaluated split (``eval_every``: ``test_misclass``,
                      ``test_cost``, ``test_confusion``, ...; :mod:`~distnet.experiments.metrics`)
                      and the policy's decisions, then a final line ``{"final": true,
                      train_misclass, test_misclass, size, grid, stop, checkpoints, ...}``
    checkpoint.h5     the model checkpoint (:mod:`distnet.models.checkpoint`), unless disabled
    log.txt           what rank 0 logged (the lines printed, progress lines, the error if any)

A directory named with ``--run-dir`` that already holds a run (a ``run.json``) is refused:
nothing already written is overwritten; one that holds other files is refused unless ``force``.
The directory is claimed by creating ``run.json`` with ``O_EXCL``: of two runs started together
on one directory, one proceeds and the other is refused.

Status in ``run.json`` (what :func:`run_status` reports):

* ``running``: rank 0 is alive (same host: its pid exists; another host: ``run.json``'s
  modification time, touched every :data:`HEARTBEAT_SECONDS`, is recent);
* ``finished``; ``failed`` (``error``; ``failed_rank`` the rank that failed first; ``failures``
  one ``{rank, status, error}`` per rank that reported); ``interrupted`` (a signal: Ctrl-C,
  SIGTERM; which rank saw it and which signal);
* ``crashed`` is never written: it is what a record that still says ``running`` means when its
  process is gone (``kill -9``, a node lost) — decided by the reader.

Every rank, not only rank 0, records its failure here before it aborts the job
(:func:`record_failure`, through :func:`~distnet.comm.abort.add_abort_listener`).
"""
import contextlib
import datetime
import json
import os
import socket
import sys
import threading
import time

from ..errors import DistnetError
from ..fileio import OutputError, claim_file, pid_alive, reason, write_text

ENV_BASE = "DISTNET_RUNS_DIR"
LOG_FILE = "log.txt"
#: The files a run directory holds beside its checkpoint (no --metrics / --checkpoint may be one).
RECORD_FILES = ("run.json", "metrics.jsonl", LOG_FILE, "experiment.yaml", "resolved.yaml")
#: Rank 0 touches ``run.json`` this often while the run lives.
HEARTBEAT_SECONDS = 30
#: What ``attempts`` keeps of an earlier attempt of a job (``--resume auto``, :meth:`RunDir.take_over`).
ATTEMPT_KEYS = ("started", "finished", "host", "pid", "command", "resume", "checkpoint", "error", "failed_rank",
                "failed_host", "failed_phase", "preempted")
#: A ``running`` record of another host whose heartbeat is older than this is ``crashed``.
STALE_SECONDS = 4 * HEARTBEAT_SECONDS
DONE = ("finished", "failed", "interrupted", "preempted")


class RunDirError(DistnetError):
    """A run directory that cannot be used."""


# ---------------------------------------------------------------------------------------------
# Versions
# ---------------------------------------------------------------------------------------------

def versions():
    """``distnet info``'s stack as a dict, without starting MPI in a one-process run."""
    from .stack import stack_info
    return dict(stack_info(init_mpi=False))


# ---------------------------------------------------------------------------------------------
# The directory
# ---------------------------------------------------------------------------------------------

def default_run_dir(experiment_path, base=None, now=None):
    """``<base>/<stem>-<YYYYmmdd-HHMMSS>`` (base: ``$DISTNET_RUNS_DIR`` or ``runs``)."""
    base = base or os.environ.get(ENV_BASE) or "runs"
    stem = os.path.splitext(os.path.basename(experiment_path))[0] or "run"
    stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    return os.path.join(base, f"{stem}-{stamp}")


def _now():
    return datetime.datetime.now().isoformat(timespec="seconds")


def _host():
    return socket.gethostname()


def _pid_start(pid):
    """Start time of process ``pid`` in clock ticks since boot (Linux), else None: with the pid
    it tells a process apart from a later one that got the same pid."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _has_content(path):
    try:
        return any(True for _ in os.scandir(path))
    except OSError:
        return False


class RunDir:
    """Writes one run's directory. Create with :meth:`create` (rank 0 only)."""

    def __init__(self, path):
        self.path = path
        self.info = {}
        self._beat = None

    @classmethod
    def create(cls, path=None, experiment_path="run.yaml", force=False):
        """Make and claim the directory: ``path`` (must not hold a run; must be empty unless
        ``force``) or a fresh default name. :class:`RunDirError` if it cannot be used."""
        if path:
            held = RunDirError(f"run directory {path} already holds a run (run.json); give another "
                               "--run-dir or remove it")
            if os.path.exists(os.path.join(path, "run.json")):
                raise held
            if os.path.exists(path) and not os.path.isdir(path):
                raise RunDirError(f"run directory {path} is not a directory")
            if not force and _has_content(path):
                if os.path.exists(os.path.join(path, "run.json")):  # claimed a moment ago
                    raise held
                raise RunDirError(f"run directory {path} is not empty and holds no run (no run.json); "
                                  "give another --run-dir, or --force to write the run into it")
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as e:
                raise RunDirError(f"cannot create run directory {path}: {reason(e)}") from None
            return cls(path)._claim()
        base = default_run_dir(experiment_path)
        for i in range(1, 1000):
            candidate = base if i == 1 else f"{base}-{i}"
            try:
                os.makedirs(candidate)
                return cls(candidate)._claim()
            except FileExistsError:
                continue
            except OSError as e:
                raise RunDirError(f"cannot create run directory {candidate}: {reason(e)}") from None
        raise RunDirError(f"cannot find a free run directory name like {base}")

    @classmethod
    def take_over(cls, path, experiment_path, force=False):
        """``--resume auto --run-dir PATH``: the run directory of every attempt of one job. A
        fresh ``PATH`` is created as :meth:`create` does; one that holds an earlier attempt of
        this experiment (a ``run.json`` whose run is over: finished, failed, interrupted,
        preempted, crashed) is taken over: the earlier record goes into ``attempts``, the new
        attempt writes the rest (``metrics.jsonl`` anew, from the checkpoint's replayed epochs;
        ``log.txt`` goes on). :class:`RunDirError` for a run still running or another
        experiment's."""
        info = read_info(os.path.join(path, "run.json"))
        if not info:
            return cls.create(path, experiment_path, force=force)
        with _locked(path):
            info = read_info(os.path.join(path, "run.json"))
            status = run_status(path, info)
            if status in ("running", "starting"):
                raise RunDirError(f"run directory {path} holds a run that is still {status} (pid {info.get('pid')} "
                                  f"on {info.get('host')}): one attempt of a job at a time")
            source = info.get("experiment")
            if source and os.path.basename(source) != os.path.basename(experiment_path):
                raise RunDirError(f"run directory {path} holds a run of {source}, not of {experiment_path}; give "
                                  "another --run-dir")
            attempts = list(info.pop("attempts", []) or [])
            attempts.append({k: info.get(k) for k in ATTEMPT_KEYS if info.get(k) is not None} | {"status": status})
            record = cls(path)
            record._claim(attempts, replace=True)
        record.log_line(f"--- attempt {len(attempts) + 1} (resume auto) ---")
        return record

    def _claim(self, attempts=(), replace=False):
        self.info = {"status": "starting", "host": _host(), "pid": os.getpid(),
                     "pid_start": _pid_start(os.getpid()), "started": _now()}
        if attempts:
            self.info["attempts"] = list(attempts)
        if replace:
            self._write_text("run.json", json.dumps(self.info, indent=2, default=str) + "\n")
            return self
        try:
            claim_file(self.file("run.json"), json.dumps(self.info, indent=2) + "\n", "run record")
        except FileExistsError:
            raise RunDirError(f"run directory {self.path} already holds a run (run.json, just claimed by "
                              "another run); give another --run-dir") from None
        except OutputError as e:
            raise RunDirError(str(e)) from None
        return self

    def file(self, name):
        return os.path.join(self.path, name)

    def _write_text(self, name, text):
        try:
            write_text(self.file(name), text, "run record")
        except OutputError as e:
            raise RunDirError(str(e)) from None

    def start(self, config, command=None, resume=None, checkpoint=None):
        """Write the experiment, the resolved experiment and ``run.json`` (status running), and
        start the heartbeat (a daemon thread touching ``run.json``)."""
        if config:
            self._write_text("experiment.yaml", config["yaml"])
            self._write_text("resolved.yaml", config["resolved"])
        self.info.update({"command": command if command is not None else sys.argv,
                          "experiment": config.get("source") if config else None,
                          "overrides": config.get("overrides", []) if config else [],
                          "resume": os.path.abspath(resume) if resume else None,
                          "checkpoint": os.path.abspath(checkpoint) if checkpoint else None,
                          "status": "running", "started": _now(),
                          "heartbeat_seconds": HEARTBEAT_SECONDS})
        self.save_info()
        self._write_text("metrics.jsonl", "")
        self._beat = threading.Event()
        threading.Thread(target=self._heartbeat, args=(self._beat,), daemon=True,
                         name="distnet-heartbeat").start()

    def _heartbeat(self, stop):
        while not stop.wait(HEARTBEAT_SECONDS):
            try:
                os.utime(self.file("run.json"))
            except OSError:
                pass

    def save_info(self):
        """Write ``run.json`` from :attr:`info`, keeping the failures other ranks recorded."""
        with _locked(self.path):
            on_disk = read_info(self.file("run.json"))
            failures = _merge_failures(on_disk.get("failures"), self.info.get("failures"))
            if failures:
                self.info["failures"] = failures
                if self.info.get("status") == "running":  # another rank ended the run
                    for key in ("status", "error", "failed_rank", "failed_host", "failed_phase", "finished"):
                        if key in on_disk:
                            self.info[key] = on_disk[key]
            self._write_text("run.json", json.dumps(self.info, indent=2, default=str) + "\n")

    def topology(self, topology, versions_dict, hosts=None):
        """Record the run's layout, versions and ``hosts`` (every rank's host, in rank order:
        kept as ``{host: "0-1,4"}``, which names the host of a rank a failure record names)."""
        self.info["topology"] = {"size": topology.size, "grid": list(topology.grid),
                                 "data": topology.ndata, "pipe": topology.npipe}
        self.info["versions"] = versions_dict
        if hosts:
            self.info["hosts"] = hosts_of_ranks(hosts)
        self.save_info()

    def log_handler(self):
        """A logging handler that appends to ``log.txt`` (plain messages)."""
        import logging

        from ..log import LogFile
        try:
            handler = LogFile(self.file(LOG_FILE))      # a full disk: one warning, not a traceback a line
        except OSError as e:
            raise RunDirError(f"cannot write run record {self.file(LOG_FILE)}: {reason(e)}") from None
        handler.setFormatter(logging.Formatter("%(message)s"))
        return handler

    def log_line(self, text):
        """Append one line to ``log.txt`` (e.g. the error that ended the run)."""
        with open(self.file(LOG_FILE), "a", encoding="utf-8") as f:
            f.write(text + "\n")

    def metrics(self, record):
        try:
            with open(self.file("metrics.jsonl"), "a") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as e:
            raise RunDirError(f"cannot write run record {self.file('metrics.jsonl')}: {reason(e)}") from None

    def finish(self, status, error=None, timings=None, rank=None, phase=None):
        """Record the end: ``status`` finished / failed / interrupted / preempted, the ``error``
        text, the ``rank`` it happened on (None: every rank, or one process), its host (from
        ``hosts``) and its ``phase``."""
        if self._beat is not None:
            self._beat.set()
        self.info.update(status=status, finished=_now())
        if error:
            self.info["error"] = error
            host = host_of_rank(self.info.get("hosts"), rank) if rank is not None else _host()
            failure = {"rank": rank, "host": host, "phase": phase, "status": status, "error": error}
            for key in ("rank", "host", "phase"):
                self.info.setdefault(f"failed_{key}", failure[key])
            self.info["failures"] = _merge_failures(self.info.get("failures"), [failure])
        if timings:
            self.info["timings"] = timings
        self.save_info()


@contextlib.contextmanager
def _locked(path, timeout=2.0):
    """Hold a lock on the directory ``path`` itself (``flock``) while reading and rewriting
    ``run.json``, so that ranks recording their failures at the same moment do not lose each
    other's lines. Gives up waiting after ``timeout`` s (a record without the lock beats none)."""
    try:
        import fcntl
        fd = os.open(path, os.O_RDONLY)
    except (ImportError, OSError):
        yield
        return
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)


def read_info(path):
    """The dict in a ``run.json`` file; ``{}`` if it is missing or not a JSON object."""
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


def _merge_failures(a, b):
    out = []
    for rec in list(a or []) + list(b or []):
        if isinstance(rec, dict) and rec not in out:
            out.append(rec)
    return out


def record_failure(path, record):
    """Record in ``<path>/run.json`` the failure ``record`` (:func:`~distnet.comm.abort.failure_record`:
    the rank it is about, its host and phase, the status, the message); called by any rank right
    before it aborts the job. The first failure sets ``status``, ``error``, ``failed_rank``,
    ``failed_host`` and ``failed_phase``; every one is appended to ``failures``. Does nothing if
    this rank cannot see ``run.json`` (another node's disk)."""
    target = os.path.join(path, "run.json")
    if not os.path.exists(target):
        return
    with _locked(path):
        info = read_info(target)
        if not info:
            return
        if info.get("status") in ("starting", "running"):
            info.update(status=record["status"], error=record["error"], failed_rank=record["rank"],
                        failed_host=record.get("host"), failed_phase=record.get("phase"), finished=_now())
        info["failures"] = _merge_failures(info.get("failures"), [record])
        write_text(target, json.dumps(info, indent=2, default=str) + "\n", "run record")


def hosts_of_ranks(hosts):
    """``{host: "0-1,4"}`` of every rank's host (a list in rank order)."""
    by = {}
    for rank, host in enumerate(hosts):
        runs = by.setdefault(host, [])
        if runs and runs[-1][1] == rank - 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return {h: ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) for h, runs in by.items()}


def host_of_rank(hosts, rank):
    """The host of ``rank`` in a :func:`hosts_of_ranks` record, or None."""
    for host, text in (hosts or {}).items():
        for part in str(text).split(","):
            a, _, b = part.partition("-")
            if a.isdigit() and int(a) <= rank <= int(b or a):
                return host
    return None


def run_status(path, info=None, now=None):
    """The status of the run in directory ``path``: what ``run.json`` says, except that a
    ``running`` (or ``starting``) record whose process is gone is ``crashed``: on this host, its
    pid does not exist (or is another process now); on another host, its heartbeat (the
    modification time of ``run.json``) is older than :data:`STALE_SECONDS`."""
    info = read_info(os.path.join(path, "run.json")) if info is None else info
    status = info.get("status")
    if status not in ("running", "starting"):
        return status
    pid, host = info.get("pid"), info.get("host")
    if host == _host() and isinstance(pid, int):
        alive = pid_alive(pid) and (info.get("pid_start") is None or _pid_start(pid) in (None, info["pid_start"]))
        return status if alive else "crashed"
    try:
        age = (now or time.time()) - os.stat(os.path.join(path, "run.json")).st_mtime
    except OSError:
        return status
    return "crashed" if age > STALE_SECONDS else status


# ---------------------------------------------------------------------------------------------
# Reading runs back (plots)
# ---------------------------------------------------------------------------------------------

def read_metrics_file(path):
    """``(epoch records, final record or {})`` of a metrics JSON-lines file."""
    epochs, final = [], {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = list(enumerate(f, 1))
    except UnicodeDecodeError:
        raise DistnetError(f"{path}: not a metrics file (not UTF-8 text)") from None
    for n, line in lines:
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise DistnetError(f"{path}:{n}: not a JSON line ({e.msg})") from None
        if not isinstance(rec, dict):
            raise DistnetError(f"{path}:{n}: not a metrics record (a JSON object), got {line.strip()[:40]}")
        if "epoch" in rec and not rec.get("final") and not isinstance(rec.get("cost"), (int, float)):
            raise DistnetError(f"{path}:{n}: not a metrics record: an epoch without a numeric cost")
        if "epoch" in rec and not rec.get("final") and (not isinstance(rec["epoch"], int)
                                                         or isinstance(rec["epoch"], bool)):
            raise DistnetError(f"{path}:{n}: not a metrics record: epoch {rec['epoch']!r} is not a whole number")
        bad = next((k for k, v in rec.items() if k.endswith("_misclass") and v is not None and   # null: not measured
                    (isinstance(v, bool) or not isinstance(v, (int, float)))), None)
        if bad is not None:
            raise DistnetError(f"{path}:{n}: not a metrics record: {bad} {rec[bad]!r} is not a number")
        if rec.get("final"):
            final = rec
        elif "epoch" in rec:
            epochs.append(rec)
    return epochs, final


def read_run(path):
    """A run directory (or a metrics ``.jsonl`` file) -> ``{label, epochs, final, info}``."""
    if os.path.isdir(path):
        metrics = os.path.join(path, "metrics.jsonl")
        if not os.path.exists(metrics):
            raise DistnetError(f"{path} is not a run directory (no metrics.jsonl)")
        info = {}
        if os.path.exists(os.path.join(path, "run.json")):
            try:    # a damaged record only loses the label's details
                with open(os.path.join(path, "run.json"), encoding="utf-8") as f:
                    info = json.load(f)
            except (OSError, ValueError):
                info = {}
            info = info if isinstance(info, dict) else {}
    elif os.path.isfile(path):
        metrics, info = path, {}
    else:
        raise DistnetError(f"{path}: no such run directory or metrics file")
    epochs, final = read_metrics_file(metrics)
    if os.path.isdir(path) and info.get("status"):
        info = dict(info, status=run_status(path, info))
    return {"label": run_label(path, info), "epochs": epochs, "final": final, "info": info}


def _count(v):
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else None


def run_label(path, info):
    """``name (4 ranks, grid 2x2[, data 2][, status])``; only the name when ``run.json``'s
    topology is missing or not what this distnet writes (another version, an edited file)."""
    name = os.path.basename(os.path.normpath(path))
    topo = info.get("topology")
    topo = topo if isinstance(topo, dict) else {}
    size, grid, data = _count(topo.get("size")), topo.get("grid"), _count(topo.get("data", 1))
    if size is None or data is None or not (isinstance(grid, list) and len(grid) == 2 and all(map(_count, grid))):
        return name
    py, px = grid
    where = "1 process" if size == 1 else f"{size} ranks, grid {py}x{px}" + (f", data {data}" if data > 1 else "")
    status = info.get("status")
    return f"{name} ({where}" + (f", {status}" if isinstance(status, str) and status != "finished" else "") + ")"
