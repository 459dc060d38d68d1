"""What every experiment kind (:class:`~distnet.experiments.fit.FitExperiment`,
:class:`~distnet.experiments.seq2seq.Seq2SeqExperiment`) has in common: the ``logging``,
``checkpoint`` and ``eval_every`` keys, the topology, checkpoints, and ``run`` (the one training
loop, :mod:`distnet.experiments.loop`)."""
import logging

from ..backend import under_seterr_handling
from ..config.builder import config_error
from ..errors import ConfigError
from ..log import check_logging, get_logger, setup_logging
from .loop import run_experiment
from .policy import POLICY_KEYS, check_policy_keys

_CHECKPOINT_KEYS = {"enabled", "every", "path", "at_end", "sharded", "every_steps", "every_minutes", "async",
                    "on_signal", "grace"} | POLICY_KEYS
#: ``checkpoint.on_signal`` by default: Slurm's ``--signal=USR1@SECONDS`` and the SIGTERM before
#: a time limit's or a preemption's kill (:mod:`distnet.comm.signals`).
DEFAULT_SIGNALS = ("SIGUSR1", "SIGTERM")
#: ``checkpoint.grace`` by default (seconds from the first preemption signal to ending at once).
DEFAULT_GRACE = 60


def check_checkpoint_key(value):
    """The ``checkpoint`` mapping (``enabled``, ``every``, ``path``, ``at_end``, ``sharded``,
    ``every_steps``, ``every_minutes``, ``async``, ``on_signal``, ``grace``, and the policy's
    keys of :mod:`~distnet.experiments.policy`) checked; ``{}`` for None."""
    if value is None:
        return {}
    unknown = set(value) - _CHECKPOINT_KEYS
    if unknown:
        raise ConfigError(f"unknown checkpoint key(s) {sorted(unknown)}; valid: {sorted(_CHECKPOINT_KEYS)}",
                          key="checkpoint")
    for key, what in (("every", "0: only at the end"), ("every_steps", "0: none")):
        v = value.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"checkpoint {key} must be an integer >= 0 ({what}), got {v!r}", key="checkpoint")
    for key, what in (("every_minutes", "0: none"), ("grace", "0: no limit")):
        v = value.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
            raise ConfigError(f"checkpoint {key} must be a number >= 0 ({what}), got {v!r}", key="checkpoint")
    path = value.get("path")
    if path is not None and (not isinstance(path, str) or not path):
        raise ConfigError(f"checkpoint path must be a file name, got {path!r}", key="checkpoint")
    for key, default in (("enabled", True), ("at_end", True), ("sharded", False), ("async", False)):
        if not isinstance(value.get(key, default), bool):
            raise ConfigError(f"checkpoint {key} must be True or False, got {value[key]!r}", key="checkpoint")
    signal_numbers(value.get("on_signal", DEFAULT_SIGNALS))
    check_policy_keys(value)
    return dict(value)


def signal_numbers(names):
    """``checkpoint.on_signal`` (a list of signal names, ``SIGUSR1`` or ``USR1``; ``[]``: none) as
    signal numbers; ConfigError at ``checkpoint`` otherwise (SIGINT stays Ctrl-C: it ends a run
    at once; SIGKILL and SIGSTOP cannot be caught)."""
    import signal
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise ConfigError(f"checkpoint on_signal must be a list of signal names such as [SIGUSR1, SIGTERM] "
                          f"([] for none), got {names!r}", key="checkpoint")
    out = []
    for name in names:
        full = str(name).upper() if str(name).upper().startswith("SIG") else f"SIG{str(name).upper()}"
        if full not in ("SIGUSR1", "SIGUSR2", "SIGTERM", "SIGHUP") or full not in signal.Signals.__members__:
            raise ConfigError(f"checkpoint on_signal: {name!r} is not a signal a run can answer with a checkpoint "
                              "(SIGUSR1, SIGUSR2, SIGTERM or SIGHUP; Ctrl-C's SIGINT ends a run at once)",
                              key="checkpoint")
        out.append(int(getattr(signal, full)))
    return out


def setup_experiment_logging(experiment, t):
    """``experiment.logging`` applied on every rank of topology ``t``; an unwritable log file
    (opened by rank 0; with ``log_dir``, every rank's own) ends every rank with the experiment's
    file:line (collective over ``t.world``)."""
    from ..comm.abort import run_collectively
    from ..comm.launcher import host_name
    lc = dict(experiment.logging)

    def setup():
        try:
            setup_logging(t.rank, t.size, lc.get("level", logging.INFO), lc.get("format"), lc.get("filename"),
                          lc.get("log_dir"), host_name())
        except ConfigError as e:
            raise config_error(experiment, e.bare_message, e.key) from None

    run_collectively(setup, t.world)
    if lc.get("log_dir"):
        _rank_file_listeners()


_told = {"listening": False}


def _rank_file_listeners():
    """A rank's own log file (``logging.log_dir``) also gets its phases and its failure (once
    per process)."""
    if _told["listening"]:
        return
    from ..comm.abort import add_abort_listener
    from ..comm.phase import on_enter
    from ..log import rank_file_line
    on_enter(lambda name: rank_file_line(f"phase: {name}"))
    add_abort_listener(lambda r: rank_file_line(f"{r['status']}: {r['error']} (rank {r['rank']} on {r['host']}, "
                                                f"in {r['phase']})", logging.ERROR))
    _told["listening"] = True


class Experiment:
    """The base of the experiment kinds. A kind sets ``model``, ``dataset``, ``backend``,
    ``data``, ``pipe`` and calls :meth:`_run_keys`; it implements ``layout`` and what the loop
    (:mod:`distnet.experiments.loop`) asks: ``setup(topology)`` (returns the topology),
    ``load_data()`` (``{split: arrays}``), ``log_start(log)``, ``eval_splits()`` (the splits
    measured after an epoch), ``log_epoch(record, log)`` and ``final_metrics(data, history,
    result, log)``; :meth:`evaluates`, :meth:`read_ahead` and :meth:`note_start` have defaults."""

    #: ``[(level, message)]`` about the file's keys (neon spellings translated, keys ignored),
    #: set by :func:`~distnet.config.load_experiment`; logged at the start of a run.
    config_notes = ()
    dist_flag = False
    #: Whether a run names its best epoch (the lowest validation, else test, error rate).
    picks_best_epoch = True
    #: The metric a checkpoint policy selects on unless its ``monitor`` says (``valid_<metric>``).
    default_metric = "misclass"

    def _run_keys(self, logging, checkpoint, eval_every, watchdog=None, tensorboard=False):
        """The keys of every kind: ``logging``, ``checkpoint``, ``eval_every``, ``watchdog``,
        ``tensorboard`` (the keys ``distnet run``'s options set: docs/commands.md)."""
        self.logging = check_logging(logging)
        ck = check_checkpoint_key(checkpoint)
        #: False: the run writes no checkpoint at all (``checkpoint.enabled``, ``--no-checkpoint``).
        self.checkpoint_enabled = ck.get("enabled", True)
        #: Write a checkpoint every this many epochs (0: only at the end).
        self.checkpoint_every = ck.get("every", 0) if self.checkpoint_enabled else 0
        #: Where checkpoints go (None: the run's default, :meth:`checkpoint_target`).
        self.checkpoint_path = ck.get("path") if self.checkpoint_enabled else None
        self.checkpoint_at_end = ck.get("at_end", True)
        #: Write checkpoints as a sharded folder (every rank its part; docs/checkpoints.md).
        self.checkpoint_sharded = ck.get("sharded", False)
        #: A checkpoint inside an epoch every this many optimiser steps, and every this many
        #: minutes (0: none; :mod:`~distnet.experiments.checkpointing`).
        self.checkpoint_every_steps = ck.get("every_steps", 0) if self.checkpoint_enabled else 0
        self.checkpoint_every_minutes = ck.get("every_minutes", 0) if self.checkpoint_enabled else 0
        #: Sharded checkpoints written by a background thread from a staged copy of each share.
        self.checkpoint_async = ck.get("async", False)
        #: The signal numbers answered with a checkpoint and exit 75 (:mod:`distnet.comm.signals`),
        #: and the seconds after the first one before the run ends at once (None: no limit).
        self.checkpoint_on_signal = tuple(signal_numbers(ck.get("on_signal", DEFAULT_SIGNALS)))
        self.checkpoint_grace = ck.get("grace", DEFAULT_GRACE) or None
        #: ``{"save_bytes", "save_seconds", "restore_bytes", "restore_seconds", ...}`` of this run's
        #: checkpoint reads and writes (the last save; the run record keeps them).
        self.checkpoint_io = {}
        #: The policy keys (``monitor``, ``keep_best``, ``keep_last``, ``patience``, ``min_delta``,
        #: ``select_on_test``) of :class:`~distnet.experiments.policy.CheckpointPolicy`.
        self.checkpoint_policy = {k: v for k, v in ck.items() if k in POLICY_KEYS}
        if eval_every < 0:
            raise ConfigError(f"eval_every must be >= 0, got {eval_every}", key="eval_every")
        self.eval_every = eval_every
        #: Seconds without a training step after which ``distnet run`` ends the job, naming the
        #: rank that stalled (:mod:`distnet.comm.watchdog`); None: no watchdog.
        self.watchdog = watchdog
        #: ``distnet run`` also writes TensorBoard event files into its run directory.
        self.tensorboard = tensorboard
        #: ``{source, yaml, resolved, overrides}`` stored in checkpoints (what it was built from:
        #: :func:`~distnet.config.load_experiment` with ``record``).
        self.config_record = None
        #: The dataset's preprocessing as checkpoints keep it (JSON; found by world rank 0 at
        #: the first save: :meth:`checkpoint_config`).
        self._preprocessing = None

    def checkpoint_target(self, default=None):
        """Where this run's checkpoints go: ``checkpoint.path``, else ``default`` (``distnet
        run``: ``checkpoint.h5`` in its run directory); None when the run writes none
        (``checkpoint.enabled: false``, or neither is given)."""
        return (self.checkpoint_path or default) if self.checkpoint_enabled else None

    def build_notes(self):
        """Notes about keys the built objects do not use (the model's learning rates), for
        :attr:`config_notes` (:func:`~distnet.config.load_experiment` adds them)."""
        return self.model.notes()

    def make_topology(self):
        """The run's topology ``world = data x pipe x Py x Px``: serial for a plain one-process
        run, else from MPI's world, cut by ``layout``."""
        from ..comm.launcher import launcher_world_size
        from ..comm.topology import Topology
        if not self.dist_flag and self.data == 1 and self.pipe == 1:
            layout = self.layout(launcher_world_size()[0])   # refuses a launch on several ranks
            return Topology.serial(len(layout.grid))          # volumes: 3 spatial axes
        world = Topology.world_comm()
        return Topology.from_layout(self.layout(world.Get_size()), world)

    def save_checkpoint(self, path, epoch, history=(), position=None, shuffle_state=None, background=False):
        """Write the model's state after ``epoch`` to ``path`` (collective, world rank 0 writes;
        never a checkpoint of non-finite weights); ``position`` and ``shuffle_state``: inside
        the next epoch (:func:`~distnet.models.sharded.save_any`). With ``background`` (a
        sharded checkpoint of ``checkpoint.async``), returns the
        :class:`~distnet.models.shard_save.PendingSave` to :meth:`finish_save`."""
        from ..models.sharded import save_any
        from ..models.finite import check_parameters
        where = (f"in epoch {position['epoch']}, batch {position['batch']}" if position is not None
                 else f"at the end of epoch {epoch}")
        check_parameters(self.model, f"{where}; no checkpoint written to {path}")
        stats = save_any(path, self.model, self.topology, epoch, self.checkpoint_config(), history,
                         sharded=self.checkpoint_sharded, position=position, shuffle_state=shuffle_state,
                         background=background and self.checkpoint_sharded, log=get_logger())
        if isinstance(stats, dict):
            self.finish_save(stats)
            return None
        return stats

    def finish_save(self, stats):
        """Record a save's figures (``checkpoint_io``); a pending background save is finished
        first (collective). Returns the figures."""
        if not isinstance(stats, dict):
            stats = dict(stats.finish(), format="sharded")
        self.checkpoint_io.update(save_format=stats["format"], save_bytes=stats["bytes"],
                                  save_seconds=round(stats["seconds"], 6))
        if "blocking" in stats:
            self.checkpoint_io["save_blocking_seconds"] = round(stats["blocking"], 6)
        return stats

    def checkpoint_config(self):
        """What a checkpoint keeps of the experiment: :attr:`config_record` and, on world rank 0
        (which writes it), the dataset's preprocessing (:mod:`.preprocessing`), found once."""
        if self._preprocessing is None and self.topology.rank == 0:
            from .preprocessing import preprocessing_text
            self._preprocessing = preprocessing_text(self.dataset)
        return dict(self.config_record or {}, preprocessing=self._preprocessing or "")

    def restore(self, path):
        """Load the checkpoint ``path`` into the configured model (any layout wrote it);
        returns the :class:`~distnet.models.checkpoint.Checkpoint` (its ``resume`` continues
        training after it). Collective."""
        from ..models.sharded import restore_any
        ck = restore_any(self.model, path, self.topology, get_logger())
        self.checkpoint_io.update(restore_format=ck.io["format"], restore_bytes=ck.io["bytes"],
                                  restore_seconds=round(ck.io["seconds"], 6))
        return ck

    def check_monitor(self):
        """The checkpoint ``monitor`` against what the run will evaluate and record
        (:func:`~.policy.check_monitor`: the splits of :meth:`eval_splits` that
        :meth:`data_splits` has, the names of :meth:`metric_names`): ConfigError at the
        experiment's ``checkpoint`` line, from the file header alone."""
        from .policy import check_monitor
        splits = [s for s in self.eval_splits() if s in self.data_splits()]
        try:
            check_monitor(self.checkpoint_policy, splits, self.metric_names())
        except ConfigError as e:
            raise config_error(self, e.bare_message, e.key) from None

    def data_splits(self):
        """The splits the data has (train and test; a kind with a validation split says so)."""
        return ("train", "test")

    def metric_names(self):
        """The one-number metrics an evaluated split records (the model's ``metric_names``)."""
        return tuple(self.model.metric_names)

    def split_metrics(self, split):
        """The metrics of an evaluated split ``(x, labels)``: ``{name: value}`` (the model's
        ``split_metrics``). Collective."""
        return self.model.split_metrics(split)

    def evaluates(self, epoch):
        """Whether the end of ``epoch`` measures the :meth:`eval_splits` (every ``eval_every``)."""
        return bool(self.eval_every) and (epoch + 1) % self.eval_every == 0

    def read_ahead(self, train):
        """The training split's read-ahead (``Dataset.read_ahead``), None for data in memory."""
        return None

    def set_epoch(self, train, epoch):
        """Before an epoch's training steps (``epoch``) and after them (None): augmented training
        images draw that epoch's crops and flips, then show the images as stored."""

    def note_start(self, data, log):
        """Warnings about the run that need its data (none here)."""

    @under_seterr_handling
    def run(self, topology=None, hooks=None, resume=None, default_checkpoint=None):
        """Train (and evaluate); returns a :class:`~distnet.experiments.loop.RunResult`.

        topology : a :class:`~distnet.comm.Topology` (default: :meth:`make_topology`).
        hooks : a :class:`~distnet.experiments.loop.RunHooks`.
        resume : path of a checkpoint to continue from (any layout wrote it).
        default_checkpoint : where the checkpoints go when ``checkpoint.path`` is not given
            (``distnet run``: ``checkpoint.h5`` in its run directory; :meth:`checkpoint_target`).
        """
        return run_experiment(self, topology, hooks, resume, default_checkpoint)
