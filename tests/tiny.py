"""Tiny experiments for the reliability tests: synthetic HDF5 data (12x10 images, 3 classes)
and YAML texts of a CNN and of a GB model, non-dist or distributed, in float64."""
import re

import h5py
import numpy as np

CNN = """!obj:distnet.experiments.FitPredictErrorExperiment {
  backend: !obj:distnet.backends.Numpy64 {rng_seed: 5},
  datasets: [!obj:distnet.datasets.HDF5Dataset {path: DATA}],
  model: !obj:distnet.models.Convnet {
    num_epochs: 4, batch_size: 8, shuffle: True, learning_rate: 0.1,
    momentum: {type: nesterov, coef: 0.5},
    layers: [
      !obj:distnet.layers.ConvLayer {name: conv, nofm: 3, fshape: 3, padding: 1,
                                     weight_init: {type: uniform, low: -0.3, high: 0.3}},
      !obj:distnet.layers.MaxPoolingLayer {name: pool, fshape: 2},
      !obj:distnet.layers.LayerWithNoBias {name: hidden, nout: 5, weight_init: {type: normal, scale: 0.1},
                                           activation: !obj:distnet.activations.Tanh {}},
      !obj:distnet.layers.Layer {name: out, nout: 3, weight_init: {type: normal, scale: 0.1},
                                 activation: !obj:distnet.activations.Logistic {}},
    ],
  },
}
"""

GB = """!obj:distnet.experiments.FitPredictErrorExperiment {
  backend: !obj:distnet.backends.Numpy64 {rng_seed: 2},
  datasets: [!obj:distnet.datasets.HDF5Dataset {path: DATA}],
  model: !obj:distnet.models.GB {
    num_epochs: 4, num_pretrain_epochs: 1, num_initial_epochs: 1, pretraining: True,
    batch_size: 10, shuffle: True, learning_rate: 0.1, momentum: {type: constant, coef: 0.5},
    layers: [
      !obj:distnet.layers.LocalFilteringLayer {name: lf, nofm: 2, fshape: 3, pretraining: True,
        pretrain_learning_rate: 0.01, sparsity: 0.1, weight_init: {type: uniform, low: -0.1, high: 0.1}},
      !obj:distnet.layers.L2PoolingLayer {name: l2, fshape: 3, stride: 1},
      !obj:distnet.layers.LayerWithNoBias {name: out, nout: 3, weight_init: {type: uniform, low: -0.1, high: 0.1},
                                           activation: !obj:distnet.activations.Logistic {}},
    ],
  },
}
"""

_DIST_CLASSES = r"\b(ConvLayer|MaxPoolingLayer|LayerWithNoBias|Layer|LocalFilteringLayer|L2PoolingLayer)\b"


def experiment(template, data_path, dist=False):
    """The YAML text of ``template`` reading ``data_path``; ``dist``: neon's recipe applied."""
    text = template.replace("DATA", str(data_path))
    if dist:
        text = text.replace("FitPredictErrorExperiment {", "FitPredictErrorExperiment { dist_flag: True,", 1)
        text = text.replace("HDF5Dataset {", "HDF5Dataset {dist_flag: True, ")
        text = re.sub(_DIST_CLASSES + r"(?= \{)", r"\1Dist", text)
        text = text.replace("models.Convnet {", "models.ConvnetDist {").replace("models.GB {", "models.GBDist {")
    return text


def write_experiments(folder):
    """``{"cnn": path, "gb": path}``: the tiny CNN and GB experiments, written into ``folder``
    with a data file of their own."""
    data = write_data(folder / "data.h5")
    out = {}
    for name, template in (("cnn", CNN), ("gb", GB)):
        out[name] = folder / f"{name}.yaml"
        out[name].write_text(experiment(template, data))
    return out


def write_data(path, n_train=30, n_test=10, seed=0, nan_at=None):
    """Synthetic images ``(N, 1, 12, 10)``; class 0 is bright top-left. ``nan_at``: a training
    image index whose pixel [0, 0, 0] becomes NaN."""
    rng = np.random.RandomState(seed)
    with h5py.File(path, "w") as f:
        for split, n in (("train", n_train), ("test", n_test)):
            y = rng.randint(0, 3, n)
            x = rng.standard_normal((n, 1, 12, 10)) * 0.3
            x[:, 0, :4, :4] += (y == 0)[:, None, None]
            if split == "train" and nan_at is not None:
                x[nan_at, 0, 0, 0] = np.nan
            f[f"{split}/x"], f[f"{split}/y"] = x, y
        f.attrs["nclasses"] = 3
    return path


def write_masked_data(path, spatial=(12, 10), n_train=14, n_test=6, channels=2, nclasses=3, ignore=255, seed=0,
                      dtype=np.uint8):
    """Synthetic images ``(N, C, *spatial)`` of ``dtype`` with per-pixel labels ``(N, *spatial)``
    uint8 (classes ``0 .. nclasses-1``, a border of the ignore label), chunked as the converter
    chunks them; attributes ``nclasses``, ``ignore_label`` (unless None), ``class_names``."""
    rng = np.random.RandomState(seed)
    with h5py.File(path, "w") as f:
        for split, n in (("train", n_train), ("test", n_test)):
            x = rng.randint(0, 250, (n, channels) + tuple(spatial)).astype(dtype)
            y = rng.randint(0, nclasses, (n,) + tuple(spatial)).astype(np.uint8)
            if ignore is not None:
                y[(slice(None), 0)] = ignore
            edge = tuple(min(d, 4) for d in spatial)
            f.create_dataset(f"{split}/x", data=x, chunks=(1, channels) + edge)
            f.create_dataset(f"{split}/y", data=y, chunks=(1,) + edge)
        f.attrs["nclasses"] = nclasses
        f.attrs["class_names"] = [f"c{k}" for k in range(nclasses)]
        if ignore is not None:
            f.attrs["ignore_label"] = ignore
    return path


def write_target_data(path, spatial=(5, 7, 6), n_train=14, n_test=6, channels=1, ntargets=3, seed=0):
    """Synthetic float32 volumes ``(N, C, *spatial)`` with float32 targets ``(N, ntargets)`` per
    sample (regression), chunked as the converter chunks them; attribute ``target_names``."""
    rng = np.random.RandomState(seed)
    with h5py.File(path, "w") as f:
        for split, n in (("train", n_train), ("test", n_test)):
            edge = tuple(min(d, 4) for d in spatial)
            f.create_dataset(f"{split}/x", data=rng.standard_normal((n, channels) + tuple(spatial)).astype(np.float32),
                             chunks=(1, channels) + edge)
            f[f"{split}/y"] = rng.uniform(-2, 2, (n, ntargets)).astype(np.float32)
        f.attrs["target_names"] = [f"t{k}" for k in range(ntargets)]
    return path


class KeepRecords:
    """Run hooks that keep a copy of every epoch record in ``out`` (and ignore the other calls)."""

    def __init__(self, out):
        self.out = out

    def __getattr__(self, name):
        return lambda *a, **k: None

    def epoch(self, record):
        self.out.append(dict(record))


def run_recorded(text, grid=None, data=1, world=None, pipe=1):
    """``(experiment, RunResult, epoch records)`` of the YAML ``text`` run on one process
    (``grid`` None) or on ``data`` replicas x ``pipe`` stages x ``grid`` of the ranks of
    ``world`` (whose topology is freed afterwards)."""
    from distnet.comm import Topology
    from distnet.config import load_experiment_text
    exp, records = load_experiment_text(text), []
    topology = Topology.serial() if grid is None else \
        Topology.from_world(grid=grid, data=data, pipe=pipe, world=world)
    try:
        return exp, exp.run(topology=topology, hooks=KeepRecords(records)), records
    finally:
        if grid is not None:
            topology.free()
