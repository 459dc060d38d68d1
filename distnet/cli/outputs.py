"""What ``distnet run`` writes besides the model, checked before training starts (world rank 0).

* the checkpoint destination: an existing file is replaced only if it is a distnet checkpoint of
  the same experiment file (or the checkpoint being resumed), or with ``--force``; its folder must
  take files; stale temporaries of an earlier killed write are removed;
* ``--metrics F``: an existing F is refused without ``--force``; with it, the lines go to a
  temporary that replaces F only when the run succeeds (a failed run leaves F as it was); a new
  F is created at once (``O_EXCL``), so an unwritable folder is found now;
* the run directory: claimed atomically (:meth:`~distnet.experiments.rundir.RunDir.create`);
* never, even with ``--force``, a file the run reads: the experiment, the dataset's files, the
  checkpoint it resumes (the checkpoint may replace the one it resumes); nor one path for both
  ``--metrics`` and ``--checkpoint``.
"""
import json
import os
from dataclasses import dataclass

import numpy as np

from ..fileio import (OutputError, atomic_target, check_writable, claim_file, clean_stale_temps,
                      free_space, reason, refuse_existing, same_file)
from .options import RUN_CHECKPOINT


@dataclass
class Outputs:
    record: object = None    # RunDir or None
    metrics: object = None   # MetricsFile or None
    resume: str = None       # the checkpoint to resume (``--resume auto`` resolved: None for a fresh start)


def checkpoint_owner(path):
    """``(is a distnet checkpoint, its experiment source path or None)`` of an existing file."""
    try:
        import h5py
        from ..models.checkpoint import FORMAT
        from ..models.sharded import INDEX, INDEX_FORMAT
        if os.path.isdir(path):     # a sharded checkpoint: its index says whose it is
            path = os.path.join(path, INDEX)
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") not in (FORMAT, INDEX_FORMAT):
                return False, None
            source = f["config"].attrs.get("source") if "config" in f else None
            return True, (source.decode() if isinstance(source, bytes) else source) or None
    except Exception:  # noqa: BLE001 - not HDF5, not readable: not a checkpoint of ours
        return False, None


def checkpoint_need(exp):
    """About the bytes of ``exp``'s checkpoint (shapes inferred: after ``exp.check()``), or None
    when the experiment writes none or is no chain of layers (a sequence-to-sequence model)."""
    from ..models.checkpoint import checkpoint_size
    from ..models.model import Model
    if not exp.checkpoint_enabled or not (exp.checkpoint_at_end or exp.checkpoint_every) or \
            not isinstance(exp.model, Model):
        return None
    return checkpoint_size(exp.model, np.dtype(exp.backend.dtype).itemsize)


def check_space(path, need, what="checkpoint"):
    """:class:`OutputError` when the file system of ``path`` has less than ``need`` bytes free:
    found before training, not when the checkpoint is written after the last epoch (an empty
    file still fits a full disk, so :func:`check_writable` cannot tell)."""
    if need is None:
        return
    folder, free = free_space(path)
    if need > free:
        raise OutputError(f"cannot write {what} {path}: No space left on device (it needs about "
                          f"{need / 2**20:.2f} MiB, {folder} has {free / 2**20:.2f} MiB free)")


def check_checkpoint_destination(path, experiment, resume=None, force=False, need=None):
    """:class:`OutputError` unless writing a checkpoint (of about ``need`` bytes) to ``path`` is
    allowed and possible."""
    from ..models.sharded import INDEX
    sharded = os.path.isdir(path) and os.path.isfile(os.path.join(path, INDEX))
    if os.path.lexists(path) and not force:
        if os.path.isdir(path) and not sharded:
            raise OutputError(f"checkpoint {path} is a directory")
        ours, source = checkpoint_owner(path)
        if not ours:
            raise OutputError(f"checkpoint {path} already exists and is not a distnet checkpoint; "
                              "give another --checkpoint, or --force to replace it")
        if not (resume and same_file(resume, path)) and \
                (source is None or not same_file(source, experiment)):
            raise OutputError(f"checkpoint {path} already exists and belongs to another experiment "
                              f"({source or 'unknown'}); give another --checkpoint, or --force to replace it")
    clean_stale_temps(path)
    check_writable(os.path.join(path, INDEX) if sharded else path, "checkpoint")
    check_space(path, need)


class MetricsFile:
    """The ``--metrics`` JSON-lines file (rank 0). A new file is written line by line as the
    run goes; a replaced one (``--force``) goes to a temporary that takes its name at the end."""

    def __init__(self, path, force=False):
        self.path = path
        self._ctx = None
        clean_stale_temps(path)
        if os.path.lexists(path):
            refuse_existing(path, "metrics file", force)
            if os.path.isdir(path):
                raise OutputError(f"metrics file {path} is a directory")
            check_writable(path, "metrics file")
            self._ctx = atomic_target(path)
            try:
                self.target = self._ctx.__enter__()
            except OSError as e:
                raise OutputError(f"cannot write metrics file {path}: {reason(e)}") from None
        else:
            try:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            except OSError as e:
                raise OutputError(f"cannot write metrics file {path}: {reason(e)}") from None
            try:
                claim_file(path, "", "metrics file")
            except FileExistsError:
                raise OutputError(f"metrics file {path} already exists (just created by another "
                                  "process); give another --metrics") from None
            self.target = path

    def write(self, record):
        try:
            with open(self.target, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as e:
            raise OutputError(f"cannot write metrics file {self.path}: {reason(e)}") from None

    def close(self, ok):
        """Replace the old file with the new lines if ``ok``; else keep the old file."""
        ctx, self._ctx = self._ctx, None
        if ctx is None:
            return
        if ok:
            try:
                ctx.__exit__(None, None, None)
            except OSError as e:
                raise OutputError(f"cannot write metrics file {self.path}: {reason(e)}") from None
        else:
            ctx.__exit__(RuntimeError, RuntimeError("run failed"), None)


def prepare_outputs(exp, experiment, run_dir, with_run_dir, metrics_path, resume, force):
    """Check every destination and claim the run directory (world rank 0, before training; a
    checkpoint that goes into the new run directory is checked for room only). ``resume``
    ``"auto"``: the newest complete checkpoint of the run directory or checkpoint path
    (:mod:`~distnet.experiments.resume`), and a run directory of an earlier attempt is taken
    over. Returns :class:`Outputs`."""
    from ..errors import OptionError
    from ..experiments.rundir import RECORD_FILES, RunDir
    auto = resume == "auto"
    if auto:
        from ..experiments.resume import need_a_place, newest_checkpoint
        from ..log import get_logger
        need_a_place(run_dir if with_run_dir else None, exp.checkpoint_path)
        default = os.path.join(run_dir, RUN_CHECKPOINT) if run_dir and with_run_dir else None
        resume = newest_checkpoint(exp.checkpoint_target(default), run_dir if with_run_dir else None, get_logger())
    if exp.tensorboard and not with_run_dir:
        raise OptionError("tensorboard: true writes event files into the run directory, and --no-run-dir "
                          "asks for none: give one of them")
    need = checkpoint_need(exp)
    for path, flag, hint in ((metrics_path, "--metrics", " (or drop --metrics: the run directory has "
                                                         "metrics.jsonl)"),
                             (exp.checkpoint_path, "--checkpoint", "")):
        if path and run_dir and with_run_dir and any(os.path.realpath(path) == os.path.realpath(
                os.path.join(run_dir, name)) for name in RECORD_FILES):
            # both would write one file: every metrics line twice, or the log into the checkpoint
            raise OutputError(f"{flag} {path} is a file of the run directory {run_dir}, which writes "
                              f"it itself; give another name{hint}")
    if metrics_path and exp.checkpoint_path and (same_file(metrics_path, exp.checkpoint_path) or
                                                 os.path.realpath(metrics_path) == os.path.realpath(exp.checkpoint_path)):
        raise OutputError(f"--metrics {metrics_path} is also the --checkpoint; give another name (one file "
                          "cannot hold both)")
    if exp.checkpoint_path:
        check_checkpoint_destination(exp.checkpoint_path, experiment, resume, force, need)
    if metrics_path:
        if os.path.lexists(metrics_path):
            refuse_existing(metrics_path, "metrics file", force)
        check_writable(metrics_path, "metrics file")
    from ..datasets.base import Dataset
    dataset = exp.dataset
    inputs = [experiment] + (list(dataset.source_files()) if isinstance(dataset, Dataset) else [])
    for what, path in (("checkpoint", exp.checkpoint_path), ("metrics file", metrics_path)):
        for src in inputs + ([resume] if resume and what != "checkpoint" else []):
            if path and same_file(path, src):       # --force replaces outputs, never inputs
                raise OutputError(f"{what} {path} is also an input of the run ({src}); give another name")
    record = None
    if with_run_dir:
        record = RunDir.take_over(run_dir, experiment, force) if auto and run_dir else \
            RunDir.create(run_dir, experiment, force=force)
    try:
        if record is not None and not exp.checkpoint_path:     # checkpoint.h5 in the run directory
            check_space(record.file(RUN_CHECKPOINT), need)
        metrics = MetricsFile(metrics_path, force) if metrics_path else None
    except OutputError as e:
        if record is not None:
            record.finish("failed", error=f"{type(e).__name__}: {e}")
        raise
    return Outputs(record, metrics, resume)


def record_failures_in(run_dir):
    """Every rank: before this rank aborts the job, record which rank, host and phase and why in
    ``run_dir``."""
    from ..comm.abort import add_abort_listener
    from ..experiments.rundir import record_failure
    add_abort_listener(lambda record: record_failure(run_dir, record))
