"""Experiments: the YAML root. ``FitExperiment`` trains; ``FitPredictErrorExperiment`` also
reports the misclassification rates of the training and test sets
(docs/neon-semantics.md#predict-and-error-rates).

``run()`` (:meth:`~distnet.experiments.base.Experiment.run`, the one training loop of
:mod:`distnet.experiments.loop`) is the whole life of a job on one rank: topology, model planning,
weights (or a checkpoint to resume from), data (this rank's tile of every image), training with
periodic checkpoints, metrics. It returns a :class:`~distnet.experiments.loop.RunResult`,
identical on every rank; only rank 0 logs. Callers follow the run through a
:class:`~distnet.experiments.loop.RunHooks` object (the CLI writes its run directory and draws
its progress bar that way).
"""
import contextlib

from ..backend import Numpy
from ..config.builder import config_error, config_given, config_name, config_where
from ..config.types import NonNegativeInt, Positive, PositiveInt, ProcessGrid
from ..errors import ConfigError, TopologyError
from ..geometry.grid import resolve_layout
from ..layers.placement import REPLICATED
from .base import Experiment, setup_experiment_logging
from .pixel_metrics import final_fields, segmentation_lines
from .regression_metrics import REGRESSION_METRICS, final_regression_fields, regression_line, regression_split_metrics
from .run_notes import note_run_start
from .threads import setup_threads


class FitExperiment(Experiment):
    """Keys: ``model``, ``datasets`` (a list with one dataset), ``backend`` (default numpy
    float32, seed 0), ``dist_flag`` (bool: distribute the run as the dataset's ``dist_mode``
    says: ``halopar`` (default) cuts every image into tiles over a ``Py x Px`` grid, ``vecpar``
    gives every rank whole images and an ``MLPDist`` model shards its FC layers over a ``1 x P``
    grid, ``datapar`` gives every rank whole images and makes the ranks data replicas), ``grid``
    ([Py, Px], or [Pz, Py, Px] for volumes, also written "2x2x2"; an int N is N x N; default:
    the most square grid that fits, of two mirror grids the one with rows <= columns), ``data`` (number of data-parallel
    replicas, default 1: ``world size = data x pipe x Py x Px``; replicas train on disjoint
    slices of every global minibatch and sum their gradients; with ``dist_mode: datapar``
    default: all ranks of a pipeline stage, and a ``data`` that is given must say so),
    ``pipe`` (pipeline stages, default 1: the model's
    ``stages`` / its layers' ``stage`` keys place the layers on them), ``logging`` (neon's ``logging.basicConfig``
    mapping: ``level`` (a number or a name such as ``DEBUG``; ``distnet run -v`` sets ``DEBUG``,
    ``-q`` ``WARNING``), ``format``, ``filename``, and distnet's ``log_dir``: a log file per rank,
    ``DIR/rank-RRRRR.log`` (``--log-dir DIR``); other keys are errors), ``checkpoint`` (mapping:
    ``every`` N epochs, default 0 = only at the end (``--checkpoint-every N``); ``every_steps`` N
    training steps and ``every_minutes`` T minutes (agreed by rank 0), default 0 = none, resumed
    mid-epoch exactly (``--checkpoint-every-steps``, ``--checkpoint-every-minutes``);
    ``on_signal``, default [SIGUSR1, SIGTERM]: the signals that end a run after one checkpoint
    with exit 75, and ``grace``, default 60 seconds to write it (docs/cluster.md); ``async``,
    default False: a sharded save written in the background from a staged copy; ``path``, default
    ``checkpoint.h5`` in the run directory of ``distnet run`` (``--checkpoint PATH``); ``at_end``,
    default True; ``sharded``, default False: a folder every rank writes its part of,
    docs/checkpoints.md (``--sharded-checkpoint``); ``enabled``, default True; False: no
    checkpoint at all (``--no-checkpoint``); the policy keys of docs/metrics.md),
    ``eval_every`` (N: also measure the test error
    rate, and with ``FitPredictErrorExperiment`` the training one, every N epochs and record it
    with the epoch's metrics; default 0 = only at the end), ``watchdog`` (seconds: ``distnet run``
    ends the job when a training step makes no progress for that long, naming the rank that
    stalled, :mod:`distnet.comm.watchdog`; default none; ``--watchdog SECONDS``), ``tensorboard``
    (``distnet run`` also writes TensorBoard event files into its run directory; default False;
    ``--tensorboard``), ``top_k``
    (k of the top-k error rate measured with every evaluated split; default 5 when the dataset
    has more than 5 classes; 0: none; :mod:`distnet.experiments.metrics`)."""

    config_types = {"model": ("obj", "model"), "datasets": ("list", ("obj", "dataset")),
                    "backend": ("obj", "backend"), "dist_flag": bool, "logging": dict,
                    "grid": ProcessGrid, "data": PositiveInt, "pipe": PositiveInt, "checkpoint": dict,
                    "eval_every": NonNegativeInt, "watchdog": Positive, "tensorboard": bool,
                    "top_k": NonNegativeInt}
    report_errors = False

    def __init__(self, model, datasets, backend=None, dist_flag=False, logging=None, grid=None, data=None,
                 pipe=1, checkpoint=None, eval_every=0, watchdog=None, tensorboard=False, top_k=None):
        if len(datasets) != 1:
            raise ConfigError(f"give exactly one dataset (got {len(datasets)})", key="datasets")
        self.model = model
        self.dataset = datasets[0]
        self.backend = backend if backend is not None else Numpy()
        self.dist_flag = dist_flag
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
        self._run_keys(logging, checkpoint, eval_every, watchdog, tensorboard)
        self.top_k = top_k         # None: the default of resolve_top_k (checked against the classes)
        if self.dataset.dist_flag != dist_flag:
            raise ConfigError(f"the experiment has dist_flag: {dist_flag} but its dataset has "
                              f"dist_flag: {self.dataset.dist_flag}; set both", key="dist_flag")
        self._check_dist_mode()

    def _check_dist_mode(self):
        """The dataset's ``dist_mode`` must suit the model: MLPDist (whole images in, FC layers
        sharded) goes with ``vecpar`` or ``datapar``, spatial tiles (``halopar``) with the others."""
        self.model.check_layers()
        mode = self.dataset.dist_mode if self.dist_flag else None
        whole = self.model.input_layout == REPLICATED
        if mode == "vecpar" and not whole:
            raise ConfigError(f"dist_mode vecpar shards fully connected layers by input features: use "
                              f"the MLPDist model (with LayerDist / LayerWithNoBiasDist layers), not "
                              f"{config_name(self.model)}", key="model")
        if mode == "halopar" and whole:
            modes = " or ".join(self.model.whole_image_modes)
            raise ConfigError(f"{config_name(self.model)} takes whole images on every rank: give its "
                              f"dataset dist_mode: {modes}, not halopar", key="model")
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

    def check(self):
        """The checks that need no MPI and no pixels: every layer's shapes against the dataset's
        image shape, and the last layer's outputs against its classes (ConfigError)."""
        self.model.infer_shapes(self.dataset.image_shape)
        self.dataset.check()   # file datasets: scale keys vs stored dtype
        if not self.model.supervised and self.report_errors:   # RBM / DBN read no labels
            raise self.model.error(f"{config_name(self.model)} is unsupervised and has no error rates; "
                                   "use FitExperiment, not FitPredictErrorExperiment")
        self.model.check_outputs(self.dataset)
        self.metrics_top_k()
        self.check_monitor()

    def setup(self, topology=None, image_shape=None):
        """Shapes, topology, layer plans and weights; returns the topology. ``image_shape``:
        the shapes follow from it and the dataset is never asked (a checkpoint's model used
        without its data, :func:`distnet.load`); default: the dataset's, checked (:meth:`check`)."""
        if image_shape is None:
            self.check()
        else:
            self.model.infer_shapes(tuple(image_shape))
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
            with self._at_dataset_line():
                return self.dataset.load(tile=tile, seed=self.backend.rng_seed, dtype=self.backend.dtype,
                                         rank=t.rank, size=t.size, grid=t.grid)

        data = run_collectively(load, t.world)
        self.dataset.check_same_data(t.world)   # node-local copies of the data file must agree
        return data

    # -- the training loop's questions (distnet.experiments.loop) ------------------------------
    def log_start(self, log):
        """The run's first lines: the layout, the backend, the thread plan, the notes about the
        file (rank 0: every rank reads the same file), the layers (debug)."""
        t = self.topology
        log.info("distnet: %d rank(s), grid %s%s%s%s, backend %s, %s", t.size, "x".join(map(str, t.grid)),
                 f", data {t.ndata}" if t.ndata > 1 else "", f", pipe {t.npipe}" if t.npipe > 1 else "",
                 f", {self.dataset.dist_mode}" if self.dist_flag else "", self.backend,
                 self.thread_plan.describe())
        for level, note in self.config_notes if t.rank == 0 else ():
            log.log(level, "%s", note)
        for layer in self.model.layers:
            log.debug("  %s", layer.describe())

    def note_start(self, data, log):
        """The run-start warnings (:func:`~distnet.experiments.run_notes.note_run_start`; rank 0)."""
        t = self.topology
        if t.rank == 0:
            note_run_start(self, len(data["train"][0]), t.ndata, log)

    def read_ahead(self, train):
        return self.dataset.read_ahead(train[0])

    def set_epoch(self, train, epoch):
        self.dataset.set_epoch(train[0], epoch)

    def metrics_top_k(self):
        """The k of the top-k error rate (None: not measured, also for a model that does not
        classify); ConfigError at ``top_k`` for a k not below the number of classes."""
        from .metrics import resolve_top_k
        if not self.model.classifies:
            return None
        if self.model.per_pixel:   # pixels are counted right or wrong: no top-k
            if self.top_k:
                raise config_error(self, f"top_k: {self.top_k}: a per-pixel model measures no top-k error "
                                         "rate; remove top_k", "top_k")
            return None
        try:
            return resolve_top_k(self.top_k, self.dataset.nclasses)
        except ConfigError as e:
            raise config_error(self, e.bare_message, e.key) from None

    def data_splits(self):
        """The splits of the data: train and test, and valid where the file holds one or
        ``valid_fraction`` holds one out (the file header tells)."""
        with self._at_dataset_line():
            return self.dataset.split_names()

    @contextlib.contextmanager
    def _at_dataset_line(self):
        """A ConfigError found on opening the data, raised at the dataset's YAML line."""
        try:
            yield
        except ConfigError as e:
            if e.where:
                raise
            raise config_error(self.dataset, e.bare_message, e.key) from None

    def metric_names(self):
        """A classifier's one-number metrics (:func:`~distnet.experiments.metrics.metric_names`),
        else the model's own (an Autoencoder's and an RBM's ``reconstruction``)."""
        from .metrics import metric_names
        if self.model.cost.regresses:
            return REGRESSION_METRICS
        if self.model.per_pixel:
            return ("cost", "misclass", "pixel_acc", "miou", "dice")
        if self.model.classifies:
            return metric_names(self.metrics_top_k())
        return super().metric_names()

    def split_metrics(self, split):
        """Cost, error rate, top-k error rate, per-class accuracy and confusion matrix of a split
        ``(x, labels)`` (:func:`~distnet.experiments.metrics.split_metrics`; collective over the
        data replicas); a regression its errors (:mod:`~distnet.experiments.regression_metrics`); a
        model that does not classify (an Autoencoder, an RBM) gives its own."""
        if self.model.cost.regresses:
            return regression_split_metrics(self.model, *split)
        if not self.model.classifies:
            return self.model.split_metrics(split)
        from .metrics import split_metrics
        return split_metrics(self.model, *split, top_k=self.metrics_top_k())

    def eval_splits(self):
        """The splits measured every ``eval_every`` epochs (those the data has): validation,
        training (FitPredictErrorExperiment), test."""
        return ("valid", "train", "test") if self.report_errors else ("valid", "test")

    def log_epoch(self, record, log):
        """The error rates of an evaluated epoch (the model logged its cost)."""
        rates = [f"{s} misclass {record[f'{s}_misclass']:.3f}%" for s in self.eval_splits()
                 if f"{s}_misclass" in record]
        rates += [f"{s} reconstruction {record[f'{s}_reconstruction']:.5f}" for s in self.eval_splits()
                  if f"{s}_reconstruction" in record]   # RBM / DBN
        rates += [f"{s} mIoU {record[f'{s}_miou']:.3f}%" for s in self.eval_splits()
                  if f"{s}_miou" in record]             # a per-pixel model
        rates += [f"{s} mse {record[f'{s}_mse']:.5f}" for s in self.eval_splits() if f"{s}_mse" in record]
        if rates:
            log.info("epoch: %d, %s", record["epoch"], ", ".join(rates))

    def final_metrics(self, data, history, result, log):
        """FitPredictErrorExperiment: the final error rates of every split (the last epoch's
        model), each beside the best epoch's where the run named one and measured the split
        then (its record; kept in ``result.best_epoch["rates"]``)."""
        if not self.report_errors:
            return
        if self.model.cost.regresses:
            return self._final_regression(data, result, log)
        best = best_record(history, result.best_epoch)
        rates = {s: best[f"{s}_misclass"] for s in ("train", "valid", "test") if f"{s}_misclass" in best}
        if rates:
            result.best_epoch = dict(result.best_epoch, rates=rates)
        label, unit = self.model.metric_label
        for split in ("train", "valid", "test"):
            if split in data:   # a per-pixel model: the pixels' error rate, and their overlaps
                pixels = self.split_metrics(data[split]) if self.model.per_pixel else None
                rate = pixels["misclass"] if pixels else self.model.misclass_rate(*data[split])
                setattr(result, f"{split}_misclass", rate)
                result.split_images[split] = len(data[split][1])
                beside = (f" (the last epoch's model, epoch {history[-1]['epoch']}; the best epoch, "
                          f"{best['epoch']}: {rates[split]:.5f}{unit})" if split in rates else "")
                log.info("%s set %s: %.5f%s%s", split, label, rate, unit, beside)
                if pixels:
                    result.final_metrics.update(final_fields(split, pixels))
                    log.info("%s", segmentation_lines(split, pixels, ())[0])


    def _final_regression(self, data, result, log):
        """A regression's final errors of every split (the last epoch's model): MSE and MAE,
        overall and per target, kept in the final record (``test_mse``, ...)."""
        names = self.dataset.class_names()
        for split in ("train", "valid", "test"):
            if split in data:
                m = self.split_metrics(data[split])
                result.split_images[split] = len(data[split][1])
                result.final_metrics.update(final_regression_fields(split, m))
                log.info("%s", regression_line(split, m, names))

    @property
    def default_metric(self):
        """The metric a checkpoint policy selects on unless told (``valid_<metric>``)."""
        return "mse" if self.model.cost.regresses else "misclass"


def best_record(history, best):
    """The epoch record of the best epoch ``best`` (the policy's ``{"epoch", ...}``) in
    ``history``, ``{}`` when there is none."""
    if not best:
        return {}
    return next((r for r in history if r.get("epoch") == best["epoch"]), {})


class FitPredictErrorExperiment(FitExperiment):
    """:class:`FitExperiment`, then the misclassification rate of the training and test sets."""

    report_errors = True
