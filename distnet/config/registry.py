"""The explicit table of classes an experiment file may name. Nothing else can be built from YAML:
no dotted path is ever imported because a config file says so.

Each class is reachable by its distnet path (``distnet.layers.ConvLayer``), its bare name
(``ConvLayer``) and, where neon had it, neon's path (``neon.models.layer.ConvLayer``).
"""
import difflib
import importlib

from ..errors import ConfigError

# bare name -> (module that defines it, kind, distnet path, neon path or None)
_CLASSES = {}


def _add(module, kind, names, distnet_pkg, neon_module=None):
    for name in names:
        _CLASSES[name] = (module, kind, f"{distnet_pkg}.{name}",
                          f"{neon_module}.{name}" if neon_module else None)


_add("distnet.experiments.fit", "experiment", ["FitExperiment"], "distnet.experiments", "neon.experiments.fit")
_add("distnet.experiments.fit", "experiment", ["FitPredictErrorExperiment"], "distnet.experiments",
     "neon.experiments.fit_predict_err")
_add("distnet.backend", "backend", ["Numpy", "Numpy64"], "distnet.backends", "neon.backends._numpy")
_add("distnet.backend", "backend", ["CPU"], "distnet.backends")
_add("distnet.backend", "backend", ["GPU"], "distnet.backends", "neon.backends.gpu")
_add("distnet.datasets.mnist", "dataset", ["MNIST"], "distnet.datasets", "neon.datasets.mnist")
_add("distnet.datasets.cifar10", "dataset", ["CIFAR10"], "distnet.datasets", "neon.datasets.cifar10")
_add("distnet.datasets.hdf5", "dataset", ["HDF5Dataset"], "distnet.datasets")
_add("distnet.models.mlp", "model", ["MLP"], "distnet.models", "neon.models.mlp")
_add("distnet.models.convnet", "model", ["Convnet"], "distnet.models")
_add("distnet.models.convnet", "model", ["ConvnetDist"], "distnet.models", "neon.models.convnet_dist")
_add("distnet.models.mlp_dist", "model", ["MLPDist"], "distnet.models", "neon.models.mlp_dist")
_add("distnet.layers", "layer", [
    "ConvLayer", "ConvLayerDist", "MaxPoolingLayer", "MaxPoolingLayerDist", "AveragePoolingLayer",
    "AveragePoolingLayerDist", "L2PoolingLayer", "L2PoolingLayerDist", "LayerWithNoBias",
    "LayerWithNoBiasDist", "Layer", "LayerDist"], "distnet.layers", "neon.models.layer")
_add("distnet.layers", "layer", ["LocalFilteringLayer", "LocalFilteringLayerDist", "LCNLayer", "LCNLayerDist"],
     "distnet.layers", "neon.models.layer")
_add("distnet.models.gb", "model", ["GB"], "distnet.models", "neon.models.gb")
_add("distnet.models.gb", "model", ["GBDist"], "distnet.models", "neon.models.gb_dist")
_add("distnet.ops.activations", "activation", ["Logistic"], "distnet.activations", "neon.transforms.logistic")
_add("distnet.ops.activations", "activation", ["RectLin"], "distnet.activations", "neon.transforms.rectified")
_add("distnet.ops.activations", "activation", ["Identity"], "distnet.activations", "neon.transforms.linear")
_add("distnet.ops.activations", "activation", ["Tanh"], "distnet.activations", "neon.transforms.tanh")
_add("distnet.ops.activations", "activation", ["Softmax"], "distnet.activations", "neon.transforms.softmax")
_add("distnet.ops.costs", "cost", ["CrossEntropy"], "distnet.costs", "neon.transforms.cross_entropy")
_add("distnet.ops.costs", "cost", ["SumSquaredDiffs"], "distnet.costs", "neon.transforms.sum_squared")


# Further spellings of a class (bare name -> paths).
_EXTRA_PATHS = {
    "GPU": ["neon.backends.cudanet.GPU", "neon.backends._cudanet.Cudanet", "neon.backends._cudamat.Cudamat",
            "neon.backends.gpu.GPU", "neon.backends.gpu.GPUDataDist"],
    # neon's later CPU backends (2015); CPUDataDist was its data-parallel variant
    "CPU": ["neon.backends.cpu.CPU", "neon.backends.cpu.CPUDataDist"],
    # fixed-point arithmetic is not modelled: a float32 numpy backend (config/neon_compat warns)
    "Numpy": ["neon.backends.fixedpoint.FixedPoint", "neon.backends.flexpoint.FlexPoint"],
}


def register(name, module, kind, distnet_pkg, neon_module=None):
    """Add a class to the table (used by packages that define more classes, e.g. GB layers)."""
    _add(module, kind, [name], distnet_pkg, neon_module)


def _index():
    idx = {}
    for name, (module, kind, dpath, npath) in _CLASSES.items():
        for p in (name, dpath, npath, *_EXTRA_PATHS.get(name, ())):
            if p:
                idx[p] = name
    return idx


def resolve(path, where=None):
    """The class named ``path`` in YAML, and its kind ('layer', 'model', ...).

    Raises :class:`ConfigError` (with close matches) for names outside the table.
    """
    idx = _index()
    name = idx.get(path)
    if name is None:
        close = difflib.get_close_matches(path, list(idx), n=3, cutoff=0.6)
        if not close:
            close = difflib.get_close_matches(path.rsplit(".", 1)[-1], list(_CLASSES), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"unknown class !obj:{path}{hint} (distnet builds only its own classes; "
                          f"`distnet check --list-classes` lists them)", where)
    module, kind, _, _ = _CLASSES[name]
    return getattr(importlib.import_module(module), name), kind


def extra_paths(name):
    """Further spellings of the class ``name`` (neon's other backend paths), for the reference."""
    return list(_EXTRA_PATHS.get(name, ()))


def known_classes():
    """``[(bare name, kind, distnet path, neon path)]`` for documentation and ``--list-classes``."""
    return sorted((n, k, d, p) for n, (m, k, d, p) in _CLASSES.items())
