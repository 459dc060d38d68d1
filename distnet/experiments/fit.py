"""Experiments: the YAML root. ``FitExperiment`` trains; ``FitPredictErrorExperiment`` also
reports the misclassification rates of the training and test sets (NEON.md §4.2).

``run()`` is the whole life of a job on one rank: topology, model planning, weights, data
(this rank's tile of every image), training, metrics. It returns a :class:`RunResult`, identical
on every rank; only rank 0 logs.
"""
import logging
import os
from dataclasses import dataclass, field

from ..backend import Numpy
from ..errors import ConfigError, TopologyError
from ..geometry import tile_of
from ..log import get_logger, setup_logging

# Environment variables by which MPI launchers announce the world size.
_LAUNCHER_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE")


@dataclass
class RunResult:
    """What a run measured: per-epoch mean training cost and the final error rates (percent)."""

    epoch_costs: list = field(default_factory=list)
    train_misclass: float = None
    test_misclass: float = None
    grid: tuple = (1, 1)
    size: int = 1


def launcher_size():
    """World size announced by an MPI launcher's environment (1 if not launched by one)."""
    for var in _LAUNCHER_SIZE_VARS:
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 1


class FitExperiment:
    """Keys: ``model``, ``datasets`` (a list with one dataset), ``backend`` (default numpy
    float32, seed 0), ``dist_flag`` (bool: split every image over the ranks), ``grid``
    ([Py, Px]; default: the most square grid that fits), ``data`` (number of data-parallel
    replicas, default 1: ``world size = data x Py x Px``; replicas train on disjoint slices of
    every global minibatch and sum their gradients), ``logging`` (neon's
    ``logging.basicConfig`` mapping: ``level``, ``format``, ``filename``)."""

    config_types = {"model": ("obj", "model"), "datasets": ("list", ("obj", "dataset")),
                    "backend": ("obj", "backend"), "dist_flag": bool, "logging": dict,
                    "grid": "shape2", "data": int}
    report_errors = False

    def __init__(self, model, datasets, backend=None, dist_flag=False, logging=None, grid=None, data=1):
        if len(datasets) != 1:
            raise ConfigError(f"give exactly one dataset (got {len(datasets)})", key="datasets")
        self.model = model
        self.dataset = datasets[0]
        self.backend = backend if backend is not None else Numpy()
        self.dist_flag = dist_flag
        self.logging = logging or {}
        self.grid = tuple(grid) if grid is not None else None
        if grid is not None and not dist_flag:
            raise ConfigError("grid is only used with dist_flag: True", key="grid")
        if data < 1:
            raise ConfigError(f"data (the number of data-parallel replicas) must be >= 1, got {data}", key="data")
        self.data = data
        if self.dataset.dist_flag != dist_flag:
            raise ConfigError(f"the experiment has dist_flag: {dist_flag} but its dataset has "
                              f"dist_flag: {self.dataset.dist_flag}; set both", key="dist_flag")

    def make_topology(self):
        """The run's topology ``world = data x Py x Px``: serial for a plain one-process run,
        else from MPI's world (``grid`` is 1x1 unless ``dist_flag``)."""
        from ..comm.topology import Topology
        if not self.dist_flag and self.data == 1:
            n = launcher_size()
            if n > 1:
                raise TopologyError(f"this experiment has dist_flag: False but was launched on {n} "
                                    "ranks; run it without mpiexec, or distribute it "
                                    "(`distnet distribute`), or add data replicas (`data: N`)")
            return Topology.serial()
        grid = self.grid if self.dist_flag else (1, 1)
        return Topology.from_world(grid=grid, data=self.data, planes=self.model.planes())

    def setup(self, topology=None):
        """Shapes, topology, layer plans and weights; returns the topology."""
        image_shape = self.dataset.image_shape
        self.model.infer_shapes(image_shape)
        nout = self.model.layers[-1].out_shape[0]
        if nout != self.dataset.nclasses:
            raise self.model.layers[-1].error(
                f"gives {nout} outputs but the dataset has {self.dataset.nclasses} classes", "nout")
        self.topology = topology or self.make_topology()
        lc = dict(self.logging)
        setup_logging(self.topology.rank, self.topology.size, lc.get("level", logging.INFO),
                      lc.get("format"), lc.get("filename"))
        self.model.configure(self.backend, self.topology)
        self.model.init_params()
        return self.topology

    def load_data(self):
        t = self.topology
        tile = tile_of(self.dataset.image_shape[1:], t.grid, t.coords) if self.dist_flag else None
        return self.dataset.load(tile=tile, seed=self.backend.rng_seed, dtype=self.backend.dtype,
                                 rank=t.rank, size=t.size, grid=t.grid)

    def run(self, topology=None, on_epoch=None):
        """Train (and for FitPredictErrorExperiment, evaluate); returns a :class:`RunResult`."""
        t = self.setup(topology)
        log = get_logger()
        log.info("distnet: %d rank(s), grid %dx%d, backend %s", t.size, t.grid[0], t.grid[1], self.backend)
        for layer in self.model.layers:
            log.debug("  %s", layer.describe())
        data = self.load_data()
        x, y = data["train"]
        result = RunResult(grid=tuple(t.grid), size=t.size)
        result.epoch_costs = self.model.fit(x, y, self.dataset.nclasses, on_epoch=on_epoch)
        if self.report_errors:
            for split in ("train", "test"):
                if split in data:
                    rate = self.model.misclass_rate(*data[split])
                    setattr(result, f"{split}_misclass", rate)
                    log.info("%s set misclass rate: %.5f%%", split, rate)
        return result


class FitPredictErrorExperiment(FitExperiment):
    """:class:`FitExperiment`, then the misclassification rate of the training and test sets."""

    report_errors = True
