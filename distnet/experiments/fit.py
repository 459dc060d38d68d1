"""Experiments: the YAML root. ``FitExperiment`` trains; ``FitPredictErrorExperiment`` also
reports the misclassification rates of the training and test sets
(docs/neon-semantics.md#predict-and-error-rates).

``run()`` is the whole life of a job on one rank: topology, model planning, weights (or a
checkpoint to resume from), data (this rank's tile of every image), training with periodic
checkpoints, metrics. It returns a :class:`RunResult`, identical on every rank; only rank 0 logs.
Callers follow the run through a :class:`RunHooks` object (the CLI writes its run directory and
draws its progress bar that way).
"""
import logging
import time
from dataclasses import dataclass, field

from ..backend import Numpy, under_seterr_handling
from ..config.builder import config_error, config_given, config_where
from ..config.types import NonNegativeInt, Positive, PositiveInt, PositiveShape2
from ..errors import ConfigError, TopologyError
from ..geometry.grid import resolve_layout
from ..layers.placement import REPLICATED
from ..log import check_logging, get_logger, setup_logging
from .evaluate import written_on
from .run_notes import note_run_start
from .threads import setup_threads

# Environment variables by which MPI launchers announce the world size.
_CHECKPOINT_KEYS = {"every", "path", "at_end"}


@dataclass
class RunResult:
    """What a run measured: per-epoch mean training cost (from epoch 0, also for a resumed run:
    the earlier epochs come from the checkpoint) and the final error rates (percent)."""

    epoch_costs: list = field(default_factory=list)
    train_misclass: float = None
    test_misclass: float = None
    #: Final error rate of the validation split (percent; None without one).
    valid_misclass: float = None
    #: ``{"epoch", "split", "misclass"}`` of the evaluated epoch with the lowest validation (else
    #: test) error rate; None when no epoch was evaluated (``eval_every: 0``).
    best_epoch: dict = None
    grid: tuple = (1, 1)
    size: int = 1
    #: First epoch trained by this run (> 0 when resumed).
    start_epoch: int = 0
    #: Path of the last checkpoint written (None if none).
    checkpoint: str = None
    #: Wall seconds: setup, restore, data, train, eval, total.
    timings: dict = field(default_factory=dict)


class RunHooks:
    """What :meth:`FitExperiment.run` reports while it runs (no-ops here; override what you
    need). Every rank calls every hook at the same points."""

    def started(self, experiment, topology):
        """After setup: the topology is known, the weights are drawn."""

    def batch(self, epoch, batch, nbatches):
        """Before every training step."""

    def epoch(self, record):
        """After every epoch: ``{"epoch", "cost", "seconds"}`` (+ ``test_misclass`` /
        ``train_misclass`` when evaluated, ``checkpoint`` when one was written)."""

    def pretrain(self, record):
        """After GB's pretraining (before the first epoch record), per pretrained layer and
        epoch: ``{"pretrain": layer name, "pretrain_epoch", "cost", "reconstruction",
        "sparsity"}``."""

    def trained(self):
        """After the last training step and its epoch's end, before the final checkpoint and
        error rates (``distnet run``'s watchdog stops here: they are not watched)."""

    def finished(self, result):
        """After the final error rates, with the :class:`RunResult`."""


def epochs_left(done, num_epochs):
    """The resume line's end: the epochs left after epoch ``done`` of ``num_epochs``."""
    if done + 1 >= num_epochs:
        return f"no epoch left to train (num_epochs {num_epochs}): evaluating the checkpoint's model"
    return f"training epochs {done + 1} to {num_epochs - 1}"


def setup_experiment_logging(experiment, t):
    """``experiment.logging`` applied on every rank of topology ``t``; an unwritable log file
    (opened by rank 0) ends every rank with the experiment's file:line (collective over
    ``t.world``)."""
    from ..comm.abort import run_collectively
    lc = dict(experiment.logging)

    def setup():
        try:
            setup_logging(t.rank, t.size, lc.get("level", logging.INFO), lc.get("format"), lc.get("filename"))
        except ConfigError as e:
            raise config_error(experiment, e.bare_message, e.key) from None

    run_collectively(setup, t.world)


def launcher_size():
    """World size announced by an MPI launcher's environment (1 if not launched by one)."""
    from ..comm.launcher import launcher_world_size
    return launcher_world_size()[0]


def _check_checkpoint_key(value):
    if value is None:
        return {}
    unknown = set(value) - _CHECKPOINT_KEYS
    if unknown:
        raise ConfigError(f"unknown checkpoint key(s) {sorted(unknown)}; valid: {sorted(_CHECKPOINT_KEYS)}",
                          key="checkpoint")
    every = value.get("every", 0)
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise ConfigError(f"checkpoint every must be an integer >= 0 (0: only at the end), got {every!r}",
                          key="checkpoint")
    path = value.get("path")
    if path is not None and (not isinstance(path, str) or not path):
        raise ConfigError(f"checkpoint path must be a file name, got {path!r}", key="checkpoint")
    at_end = value.get("at_end", True)
    if not isinstance(at_end, bool):
        raise ConfigError(f"checkpoint at_end must be True or False, got {at_end!r}", key="checkpoint")
    return dict(value)


class FitExperiment:
    """Keys: ``model``, ``datasets`` (a list with one dataset), ``backend`` (default numpy
    float32, seed 0), ``dist_flag`` (bool: distribute the run as the dataset's ``dist_mode``
    says: ``halopar`` (default) cuts every image into tiles over a ``Py x Px`` grid, ``vecpar``
    gives every rank whole images and an ``MLPDist`` model shards its FC layers over a ``1 x P``
    grid, ``datapar`` gives every rank whole images and makes the ranks data replicas), ``grid``
    ([Py, Px]; an int N is N x N; default: the most square grid that fits, of two mirror grids
    the one with rows <= columns), ``data`` (number of data-parallel
    replicas, default 1: ``world size = data x pipe x Py x Px``; replicas train on disjoint
    slices of every global minibatch and sum their gradients; with ``dist_mode: datapar``
    default: all ranks of a pipeline stage, and a ``data`` that is given must say so),
    ``pipe`` (pipeline stages, default 1: the model's
    ``stages`` / its layers' ``stage`` keys place the layers on them), ``logging`` (neon's ``logging.basicConfig``
    mapping: ``level`` (a number or a name such as ``DEBUG``), ``format``, ``filename``; other keys are errors), ``checkpoint`` (mapping: ``every`` N epochs,
    default 0 = only at the end; ``path``, default ``checkpoint.h5`` in the run directory of
    ``distnet run``; ``at_end``, default True), ``eval_every`` (N: also measure the test error
    rate, and with ``FitPredictErrorExperiment`` the training one, every N epochs and record it
    with the epoch's metrics; default 0 = only at the end), ``watchdog`` (seconds: ``distnet run``
    ends the job when a training step makes no progress for that long, naming the rank that
    stalled, :mod:`distnet.comm.watchdog`; default none; ``--watchdog`` overrides it)."""

    config_types = {"model": ("obj", "model"), "datasets": ("list", ("obj", "dataset")),
                    "backend": ("obj", "backend"), "dist_flag": bool, "logging": dict,
                    "grid": PositiveShape2, "data": PositiveInt, "pipe": PositiveInt, "checkpoint": dict,
                    "eval_every": NonNegativeInt, "watchdog": Positive}
    report_errors = False
    #: ``[(level, message)]`` about the file's keys (neon spellings translated, keys ignored),
    #: set by :func:`~distnet.config.load_experiment`; logged at the start of a run.
    config_notes = ()

    def __init__(self, model, datasets, backend=None, dist_flag=False, logging=None, grid=None, data=None,
                 pipe=1, checkpoint=None, eval_every=0, watchdog=None):
        if len(datasets) != 1:
            raise ConfigError(f"give exactly one dataset (got {len(datasets)})", key="datasets")
        self.model = model
        self.dataset = datasets[0]
        self.backend = backend if backend is not None else Numpy()
        self.dist_flag = dist_flag
        self.logging = check_logging(logging)
        self.grid = tuple(grid) if grid is not None else None
        if grid is not None and not dist_flag:
            raise ConfigError("grid is only used with dist_flag: True", key="grid")
        if data is not None and data < 1:
            raise ConfigError(f"data (the number of data-parallel replicas) must be >= 1, got {data}", key="data")
        #: Data replicas (1 when not given; with dist_mode datapar: all ranks of a stage).
        self.data = 1 if data is None else data
        self._data_given = data is not None
        if pipe < 1:
            raise ConfigError(f"pipe (the number of pipeline stages) must be >= 1, got {pipe}", key="pipe")
        self.pipe = pipe
        ck = _check_checkpoint_key(checkpoint)
        #: Write a checkpoint every this many epochs (0: only at the end); the CLI may change it.
        self.checkpoint_every = ck.get("every", 0)
        #: Where checkpoints go (None: nowhere, unless the CLI gives its run directory's).
        self.checkpoint_path = ck.get("path")
        self.checkpoint_at_end = ck.get("at_end", True)
        if eval_every < 0:
            raise ConfigError(f"eval_every must be >= 0, got {eval_every}", key="eval_every")
        self.eval_every = eval_every
        self.watchdog = watchdog   # seconds (Positive: checked by the builder)
        #: ``{source, yaml, resolved, overrides}`` stored in checkpoints (the CLI sets it).
        self.config_record = None
        if self.dataset.dist_flag != dist_flag:
            raise ConfigError(f"the experiment has dist_flag: {dist_flag} but its dataset has "
                              f"dist_flag: {self.dataset.dist_flag}; set both", key="dist_flag")
        self._check_dist_mode()

    def build_notes(self):
        """Notes about keys the built objects do not use (the model's learning rates), for
        :attr:`config_notes` (:func:`~distnet.config.load_experiment` adds them)."""
        return self.model.notes()

    def _check_dist_mode(self):
        """The dataset's ``dist_mode`` must suit the model: MLPDist (whole images in, FC layers
        sharded) goes with ``vecpar`` or ``datapar``, spatial tiles (``halopar``) with the others."""
        self.model.check_layers()
        mode = self.dataset.dist_mode if self.dist_flag else None
        whole = self.model.input_layout == REPLICATED
        if mode == "vecpar" and not whole:
            raise ConfigError(f"dist_mode vecpar shards fully connected layers by input features: use "
                              f"the MLPDist model (with LayerDist / LayerWithNoBiasDist layers), not "
                              f"{type(self.model).__name__}", key="model")
        if mode == "halopar" and whole:
            raise ConfigError(f"{type(self.model).__name__} takes whole images on every rank: give its "
                              "dataset dist_mode: vecpar (or datapar), not halopar", key="model")
        if mode == "vecpar" and self.grid is not None and self.grid[0] != 1:
            raise ConfigError(f"dist_mode vecpar shards fully connected layers over a 1 x P grid (P blocks "
                              f"of input features), but grid is [{self.grid[0]}, {self.grid[1]}]; write "
                              f"grid: [1, {self.grid[0] * self.grid[1]}] or remove grid", key="grid")
        if mode == "datapar" and self.grid is not None:
            raise ConfigError("dist_mode datapar uses no spatial grid (every rank holds whole images); "
                              "remove grid", key="grid")

    def layout(self, nranks, image_shape=None):
        """How ``nranks`` ranks run this experiment (:func:`~distnet.geometry.grid.resolve_layout`:
        the one grid resolver, also used by ``distnet show`` / ``plan``); shapes inferred first
        (from ``image_shape``, default the dataset's)."""
        if image_shape is None:
            self.check()
        else:
            self.model.infer_shapes(image_shape)
        self._check_datapar_data(nranks)
        try:
            return resolve_layout(nranks, dist_flag=self.dist_flag, dist_mode=self.dataset.dist_mode,
                                  data=self.data, pipe=self.pipe, grid=self.grid, planes=self.model.planes())
        except TopologyError as e:
            key = self._topology_key(str(e))
            where = config_where(self, key) if key else None
            if where is None:
                raise
            raise TopologyError(f"{where}: key '{key}': {e}") from None

    def _topology_key(self, message):
        """The key of this file that a :func:`resolve_layout` error is about (the file's
        ``grid``, ``data`` or ``pipe``, when written), or None (the launch's size alone)."""
        if self.grid is not None and message.startswith("grid "):
            return "grid"
        if "data=" in message or "pipe=" in message:
            return next((k for k in ("data", "pipe") if config_given(self, k)), None)
        return None

    def _check_datapar_data(self, nranks):
        """With ``dist_mode: datapar`` every rank of a pipeline stage is a data replica; a
        ``data`` key that says another number (``data: 1`` on 4 ranks: one replica, or four?)
        contradicts it: TopologyError at the key, naming both fixes."""
        if not (self.dist_flag and self.dataset.dist_mode == "datapar" and self._data_given):
            return
        if nranks % self.pipe or self.data * self.pipe == nranks:
            return     # a launch pipe does not divide: resolve_layout says so
        where = config_where(self, "data")
        raise TopologyError(
            f"{where + ': ' if where else ''}key 'data': dist_mode datapar makes every rank a data replica "
            f"({nranks // self.pipe} on {nranks} ranks{f' and pipe: {self.pipe}' if self.pipe > 1 else ''}), "
            f"but data is {self.data}; remove data (every rank a replica) or set data: {nranks // self.pipe}, "
            f"or launch {self.data * self.pipe} rank(s)")

    def make_topology(self):
        """The run's topology ``world = data x pipe x Py x Px``: serial for a plain one-process
        run, else from MPI's world, cut by :meth:`layout`."""
        from ..comm.topology import Topology
        if not self.dist_flag and self.data == 1 and self.pipe == 1:
            self.layout(launcher_size())   # refuses a launch on several ranks
            return Topology.serial()
        world = Topology.world_comm()
        return Topology.from_layout(self.layout(world.Get_size()), world)

    def check(self):
        """The checks that need no MPI and no pixels: every layer's shapes against the dataset's
        image shape, and the last layer's outputs against its classes (ConfigError)."""
        self.model.infer_shapes(self.dataset.image_shape)
        self.dataset.check()   # file datasets: scale keys vs stored dtype
        nout = self.model.layers[-1].out_shape[0]
        if nout != self.dataset.nclasses:
            raise self.model.layers[-1].error(
                f"gives {nout} outputs but the dataset has {self.dataset.nclasses} classes", "nout")

    def setup(self, topology=None):
        """Shapes, topology, layer plans and weights; returns the topology."""
        self.check()
        self.topology = topology or self.make_topology()
        self.thread_plan = setup_threads(self.topology.world, self.backend)  # before any BLAS call
        if self.backend.name != "numpy":  # ranks of one node use distinct GPUs
            self.backend.bind_device(self.topology.local_rank())
        setup_experiment_logging(self, self.topology)
        self.model.configure(self.backend, self.topology)
        self.model.init_params()
        return self.topology

    def load_data(self):
        """This rank's tiles of both splits. Collective: if any rank fails (a missing shard,
        a truncated file), every rank raises, naming the rank and its error."""
        from ..comm.abort import run_collectively
        t = self.topology
        tile = self.dataset.rank_tile(t.grid, t.coords) if self.dist_flag else None

        def load():
            try:
                return self.dataset.load(tile=tile, seed=self.backend.rng_seed, dtype=self.backend.dtype,
                                         rank=t.rank, size=t.size, grid=t.grid)
            except ConfigError as e:   # found on opening the data: at the dataset's YAML line
                if e.where:
                    raise
                raise config_error(self.dataset, e.bare_message, e.key) from None

        data = run_collectively(load, t.world)
        self.dataset.check_same_data(t.world)   # node-local copies of the data file must agree
        return data

    def save_checkpoint(self, path, epoch, history=()):
        """Write the model's state after ``epoch`` to ``path`` (collective, world rank 0 writes)."""
        from ..models.checkpoint import save_checkpoint
        from ..models.finite import check_parameters  # never a checkpoint of NaN weights
        check_parameters(self.model, f"at the end of epoch {epoch}; no checkpoint written to {path}")
        save_checkpoint(path, self.model, self.topology, epoch, self.config_record, history)

    _pretrain_reported = 0

    def _report_pretraining(self, hooks):
        """Hand the GB pretraining costs not reported yet to ``hooks.pretrain``."""
        costs = self._pretrain_costs()
        for layer, epoch, r, s in costs[self._pretrain_reported:]:
            hooks.pretrain({"pretrain": layer, "pretrain_epoch": epoch, "cost": r + s,
                            "reconstruction": r, "sparsity": s})
        self._pretrain_reported = len(costs)

    def _pretrain_costs(self):
        """GB's ``pretrain_costs`` ``[(layer name, epoch, reconstruction, sparsity)]``; [] else."""
        from ..models.gb import GB
        return list(self.model.pretrain_costs) if isinstance(self.model, GB) else []

    def _evaluate(self, data, record, splits):
        for split in splits:
            if split in data:
                record[f"{split}_misclass"] = self.model.misclass_rate(*data[split])

    @under_seterr_handling
    def run(self, topology=None, on_epoch=None, hooks=None, resume=None):
        """Train (and for FitPredictErrorExperiment, evaluate); returns a :class:`RunResult`.

        topology : a :class:`~distnet.comm.Topology` (default: :meth:`make_topology`).
        on_epoch : ``callable(epoch, mean cost)`` after every epoch (kept for callers of old).
        hooks : a :class:`RunHooks`.
        resume : path of a checkpoint to continue from (any grid, any number of ranks).
        """
        from ..faults import fault_hook
        hooks = hooks or RunHooks()
        self._pretrain_reported = len(self._pretrain_costs())
        clock = time.perf_counter
        t_start = clock()
        t = self.setup(topology)
        timings = {"setup": clock() - t_start}
        log = get_logger()
        log.info("distnet: %d rank(s), grid %dx%d%s%s%s, backend %s, %s", t.size, t.grid[0], t.grid[1],
                 f", data {t.ndata}" if t.ndata > 1 else "", f", pipe {t.npipe}" if t.npipe > 1 else "",
                 f", {self.dataset.dist_mode}" if self.dist_flag else "", self.backend,
                 self.thread_plan.describe())  # this rank's BLAS and kernel threads
        for level, note in self.config_notes if t.rank == 0 else ():  # neon keys translated or
            log.log(level, "%s", note)      # ignored: about the file every rank reads, said once
        for layer in self.model.layers:
            log.debug("  %s", layer.describe())
        hooks.started(self, t)
        history = []
        result = RunResult(grid=tuple(t.grid), size=t.size)
        if resume:
            from ..models.checkpoint import restore_checkpoint
            t0 = clock()
            ck = restore_checkpoint(self.model, resume, t, log)
            timings["restore"] = clock() - t0
            history = [r for r in ck.history if r.get("epoch", -1) <= ck.epoch]
            result.start_epoch = ck.epoch + 1
            for r in history:  # the run's records start at epoch 0, as an uninterrupted run's
                hooks.epoch(dict(r, from_checkpoint=True))
            log.info("resumed from %s: epoch %d done (written on %s); %s", resume, ck.epoch,
                     written_on(ck), epochs_left(ck.epoch, self.model.num_epochs))
        t0 = clock()
        data = self.load_data()
        timings["data"] = clock() - t0
        x, y = data["train"]
        if t.rank == 0:
            note_run_start(self, len(x), t.ndata, result.start_epoch, log)
        eval_splits = ("train", "test") if self.report_errors else ("test",)
        if "valid" in data:  # a validation split (the file's, or valid_fraction of train)
            eval_splits = ("valid",) + eval_splits
        # streamed data prefetches the model's minibatches
        self.model.read_ahead = self.dataset.read_ahead(x)
        fault = fault_hook(t.rank)
        epoch_start = {}

        def on_batch(epoch, b, n):
            if b == 0:
                epoch_start[epoch] = clock()
            if fault is not None:
                fault(epoch, b, n)
            hooks.batch(epoch, b, n)

        def epoch_done(epoch, mean):
            self._report_pretraining(hooks)  # GB: its pretraining costs, once, before epoch records
            record = {"epoch": epoch, "cost": mean, "seconds": clock() - epoch_start.get(epoch, clock())}
            if self.eval_every and (epoch + 1) % self.eval_every == 0:
                t1 = clock()
                self._evaluate(data, record, eval_splits)
                record["eval_seconds"] = clock() - t1
                log.info("epoch: %d, %s", epoch, ", ".join(
                    f"{s} misclass {record[f'{s}_misclass']:.3f}%" for s in eval_splits if f"{s}_misclass" in record))
            history.append(record)
            last = epoch == self.model.num_epochs - 1
            if (self.checkpoint_path and self.checkpoint_every and (epoch + 1) % self.checkpoint_every == 0
                    and not (last and self.checkpoint_at_end)):
                t1 = clock()
                self.save_checkpoint(self.checkpoint_path, epoch, history)
                record["checkpoint_seconds"] = clock() - t1
                result.checkpoint = self.checkpoint_path
            if on_epoch is not None:
                on_epoch(epoch, mean)
            hooks.epoch(record)

        self.model.on_batch = on_batch
        t0 = clock()
        try:
            costs = self.model.fit(x, y, self.dataset.nclasses, on_epoch=epoch_done)
        finally:
            self.model.on_batch = None
            if self.model.read_ahead is not None:
                self.model.read_ahead([])   # forget what was scheduled
            self.model.read_ahead = None
        self._report_pretraining(hooks)
        hooks.trained()
        timings["train"] = clock() - t0
        result.epoch_costs = [r["cost"] for r in history if r["epoch"] < result.start_epoch] + list(costs)
        if self.checkpoint_path and self.checkpoint_at_end and history:
            self.save_checkpoint(self.checkpoint_path, history[-1]["epoch"], history)
            result.checkpoint = self.checkpoint_path
        result.best_epoch = best_epoch(history)
        if result.best_epoch is not None:
            log.info("best epoch: %d (%s misclass %.5f%%)", result.best_epoch["epoch"],
                     result.best_epoch["split"], result.best_epoch["misclass"])
        if self.report_errors:
            t0 = clock()
            for split in ("train", "valid", "test"):
                if split in data:
                    rate = self.model.misclass_rate(*data[split])
                    setattr(result, f"{split}_misclass", rate)
                    log.info("%s set misclass rate: %.5f%%", split, rate)
            timings["eval"] = clock() - t0
        timings["total"] = clock() - t_start
        result.timings = timings
        hooks.finished(result)
        return result


def best_epoch(history):
    """The evaluated epoch with the lowest validation error rate (the test rate when there is no
    validation split; the first of equals): ``{"epoch", "split", "misclass"}``, or None."""
    for split in ("valid", "test"):
        rated = [r for r in history if f"{split}_misclass" in r]
        if rated:
            best = min(rated, key=lambda r: r[f"{split}_misclass"])
            return {"epoch": best["epoch"], "split": split, "misclass": best[f"{split}_misclass"]}
    return None


class FitPredictErrorExperiment(FitExperiment):
    """:class:`FitExperiment`, then the misclassification rate of the training and test sets."""

    report_errors = True
