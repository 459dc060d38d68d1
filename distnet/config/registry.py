"""The explicit table of classes an experiment file may name. Nothing else can be built from YAML:
no dotted path is ever imported because a config file says so.

Each class is reachable by its distnet path (``distnet.layers.ConvLayer``), its bare name
(``ConvLayer``) and, where neon had it, neon's path (``neon.models.layer.ConvLayer``). An
*alias* is another name of a class, with its own paths (neon's ``ConvLayerDist`` and
``distnet.layers.ConvLayerDist`` build a ``ConvLayer``, which distributes itself); the built
object's ``config_spec`` keeps the name the file wrote, for messages.
Installed plugins add their own classes (entry point group ``distnet.plugins``; see the end of
this module and docs/extending.md).
"""
import difflib
import importlib

from ..errors import ConfigError

# bare name -> (module that defines it, kind, distnet path, neon path or None)
_CLASSES = {}
# alias bare name -> the bare name of the class it builds
_ALIASES = {}


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
_add("distnet.datasets.numpy_files", "dataset", ["NumpyDataset"], "distnet.datasets")
_add("distnet.models.model", "model", ["Model"], "distnet.models")
_add("distnet.models.mlp_dist", "model", ["MLPDist"], "distnet.models", "neon.models.mlp_dist")


def _alias(canonical, names, neon_module=None):
    """neon's other names of the registered class ``canonical`` (its Dist names: one class
    distributes itself), each with its own distnet path (in ``canonical``'s package) and neon
    path."""
    module, kind, dpath, _ = _CLASSES[canonical]
    for name in names:
        _CLASSES[name] = (module, kind, f"{dpath.rpartition('.')[0]}.{name}",
                          f"{neon_module}.{name}" if neon_module else None)
        _ALIASES[name] = canonical


_add("distnet.layers", "layer", ["ConvLayer", "MaxPoolingLayer", "AveragePoolingLayer", "L2PoolingLayer"],
     "distnet.layers", "neon.models.layer")
_add("distnet.layers", "layer", ["FullyConnectedNoBiasLayer", "FullyConnectedLayer"], "distnet.layers")
_add("distnet.layers", "layer", ["LocalFilteringLayer", "LCNLayer"], "distnet.layers", "neon.models.layer")
for _name in ("ConvLayer", "MaxPoolingLayer", "AveragePoolingLayer", "L2PoolingLayer", "LocalFilteringLayer",
              "LCNLayer"):
    _alias(_name, [_name + "Dist"], "neon.models.layer")
_alias("FullyConnectedNoBiasLayer", ["LayerWithNoBias", "LayerWithNoBiasDist"], "neon.models.layer")
_alias("FullyConnectedLayer", ["Layer", "LayerDist"], "neon.models.layer")
_add("distnet.layers.add", "layer", ["AddLayer"], "distnet.layers")
_add("distnet.layers.concat", "layer", ["ConcatLayer"], "distnet.layers")
_add("distnet.layers.decoder", "layer", ["DeconvLayer", "UpsampleLayer", "CropLayer"], "distnet.layers")
_alias("DeconvLayer", ["ConvTransposeLayer"])
_add("distnet.layers.tower_sum", "layer", ["TowerSumLayer"], "distnet.layers")
_add("distnet.layers.batchnorm", "layer", ["BatchNormLayer"], "distnet.layers")
_add("distnet.layers.global_pool", "layer", ["GlobalAveragePoolingLayer"], "distnet.layers")
_add("distnet.layers.dropout", "layer", ["DropoutLayer"], "distnet.layers")
for _name in ("BatchNormLayer", "GlobalAveragePoolingLayer", "DropoutLayer"):
    _alias(_name, [_name + "Dist"])
del _name
# neon's model names: one class runs every image model on one process or distributed
_alias("Model", ["MLP"], "neon.models.mlp")
_alias("Model", ["Convnet"])
_alias("Model", ["ConvnetDist"], "neon.models.convnet_dist")
_add("distnet.experiments.seq2seq", "experiment", ["Seq2SeqExperiment"], "distnet.experiments")
_add("distnet.models.seq2seq", "model", ["Seq2Seq"], "distnet.models")
_add("distnet.datasets.sequences", "dataset", ["SequenceDataset"], "distnet.datasets")
_add("distnet.models.gb", "model", ["GB"], "distnet.models", "neon.models.gb")
_alias("GB", ["GBDist"], "neon.models.gb_dist")
_add("distnet.models.rbm", "model", ["RBM"], "distnet.models", "neon.models.rbm")
_add("distnet.models.rbm", "model", ["DBN"], "distnet.models", "neon.models.dbn")
_add("distnet.layers.rbm", "layer", ["RBMLayer"], "distnet.layers", "neon.models.layer")
_add("distnet.datasets.iris", "dataset", ["Iris"], "distnet.datasets", "neon.datasets.iris")
_add("distnet.models.autoencoder", "model", ["Autoencoder"], "distnet.models", "neon.models.autoencoder")
_alias("FullyConnectedNoBiasLayer", ["AELayer"], "neon.models.layer")
_add("distnet.ops.activations", "activation", ["Logistic"], "distnet.activations", "neon.transforms.logistic")
_add("distnet.ops.activations", "activation", ["RectLin"], "distnet.activations", "neon.transforms.rectified")
_add("distnet.ops.activations", "activation", ["Identity"], "distnet.activations", "neon.transforms.linear")
_add("distnet.ops.activations", "activation", ["Tanh"], "distnet.activations", "neon.transforms.tanh")
_add("distnet.ops.activations", "activation", ["Softmax"], "distnet.activations", "neon.transforms.softmax")
_add("distnet.ops.costs", "cost", ["CrossEntropy"], "distnet.costs", "neon.transforms.cross_entropy")
_add("distnet.ops.costs", "cost", ["SumSquaredDiffs"], "distnet.costs", "neon.transforms.sum_squared")
_add("distnet.ops.costs", "cost", ["SoftmaxCrossEntropy"], "distnet.costs")
_add("distnet.ops.costs", "cost", ["SumSquared", "MeanSquared"], "distnet.costs", "neon.transforms.cost")
_add("distnet.ops.pixel_costs", "cost", ["PixelSoftmaxCrossEntropy", "PixelBinaryCrossEntropy", "DiceLoss"],
     "distnet.costs")
_add("distnet.optim.rules", "learning_rule", ["GradientDescent", "Adam", "AdamW"], "distnet.learning_rules")
_add("distnet.optim.schedules", "schedule", ["ConstantSchedule", "StepSchedule", "MultiStepSchedule", "CosineSchedule",
                                             "LinearWarmup"], "distnet.schedules")


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
    """Add a class to the table (used by packages that define more classes, e.g. GB layers;
    a plugin may call it too, but :func:`register_classes` is simpler and refuses taken names)."""
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
    check_plugins()  # the first look-up loads the installed plugins (once)
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
    return getattr(importlib.import_module(module), _ALIASES.get(name, name)), kind


def alias_of(name):
    """The bare name of the class that the alias ``name`` builds, or None if ``name`` is not an
    alias."""
    return _ALIASES.get(name)


def aliases(name):
    """The aliases of the class ``name`` (bare names, sorted)."""
    return sorted(a for a, c in _ALIASES.items() if c == name)


def extra_paths(name):
    """Further spellings of the class ``name`` (neon's other backend paths), for the reference."""
    return list(_EXTRA_PATHS.get(name, ()))


def known_classes():
    """``[(bare name, kind, distnet path, neon path)]`` for documentation and ``--list-classes``."""
    return sorted((n, k, d, p) for n, (m, k, d, p) in _CLASSES.items())


# ---------------------------------------------------------------------------------------------
# Plugins: classes that other installed packages add to the table
# ---------------------------------------------------------------------------------------------
#
# A package declares an entry point in the group ``distnet.plugins`` (pyproject.toml:
# ``[project.entry-points."distnet.plugins"] myname = "mypackage.layers"``). The entry point
# names a module whose import registers its classes (``register_classes(...)`` or
# ``register(...)`` at module level), or a callable that does so when called without
# arguments. Plugins are loaded once, the first time a class is resolved (or listed), never when
# distnet is imported. YAML still builds only registered classes: a plugin's module is imported
# because the package was installed, never because a config file names a dotted path.

PLUGIN_GROUP = "distnet.plugins"
_KINDS = ("experiment", "backend", "dataset", "model", "layer", "activation", "cost")
# loaded: plugins were looked for; plugins: [(entry point, package, [class names], error)];
# source: bare name -> "plugin <entry point> (<package>)"
_PLUGINS = {"loaded": False, "plugins": [], "source": {}}


class PluginError(ConfigError):
    """An installed plugin that cannot be loaded, or that registers a class it must not."""


def register_classes(*classes, kind="layer", neon_module=None):
    """Register classes defined outside distnet (a plugin's one registry line).

    Each class is named in YAML by its bare name (``ScaleShiftLayer``) or its full dotted path
    (``distnet_example_plugin.ScaleShiftLayer``); ``kind`` is one of ``layer``, ``model``,
    ``activation``, ``cost``, ``dataset``, ``backend``, ``experiment``. A name that distnet or
    another plugin already uses is refused (:class:`PluginError`): nothing is replaced."""
    if kind not in _KINDS:
        raise PluginError(f"register_classes: kind must be one of {', '.join(_KINDS)}, got {kind!r}")
    for cls in classes:
        if not isinstance(cls, type):
            raise PluginError(f"register_classes takes classes, got {cls!r}")
        name, module = cls.__name__, cls.__module__
        taken = _CLASSES.get(name)
        if taken is not None and (taken[0], taken[1]) != (module, kind):
            raise PluginError(f"cannot register {module}.{name}: the name {name} is taken by "
                              f"{taken[2]}; rename the class")
        _CLASSES[name] = (module, kind, f"{module}.{name}", f"{neon_module}.{name}" if neon_module else None)


def _entry_points():
    from importlib import metadata
    try:
        return list(metadata.entry_points(group=PLUGIN_GROUP))
    except TypeError:  # Python 3.9: a dict of groups
        return list(metadata.entry_points().get(PLUGIN_GROUP, ()))


def _package_of(ep):
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "unknown package"
    try:
        return f"{dist.metadata['Name']} {dist.version}"
    except Exception:  # noqa: BLE001 - broken metadata
        return "unknown package"


def _one_line(e):
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _load_one(ep):
    """Load entry point ``ep``; returns ``(names it registered, error text or None)``. A
    failing plugin registers nothing (its partial registrations are undone)."""
    before = dict(_CLASSES)
    try:
        obj = ep.load()
        if callable(obj) and not isinstance(obj, type):
            obj()
        replaced = sorted(n for n, v in before.items() if _CLASSES.get(n) != v)
        if replaced:
            raise PluginError(f"it re-registers {', '.join(replaced)}, already registered by "
                              f"{before[replaced[0]][2].rsplit('.', 1)[0]}; rename the class")
        return sorted(set(_CLASSES) - set(before)), None
    except Exception as e:  # noqa: BLE001 - any failure of foreign code: one line, no traceback
        _CLASSES.clear()
        _CLASSES.update(before)
        return [], e.bare_message if isinstance(e, PluginError) else _one_line(e)


def load_plugins():
    """Load every installed plugin (entry point group ``distnet.plugins``), once per process;
    returns ``[(entry point name, package, [class names], error or None)]``. Never raises:
    :func:`check_plugins` turns a failure into an error."""
    if not _PLUGINS["loaded"]:
        _PLUGINS["loaded"] = True
        try:
            eps = _entry_points()
        except Exception as e:  # noqa: BLE001 - unreadable metadata of some package
            _PLUGINS["plugins"].append(("?", "installed packages", [], f"cannot list plugins: {_one_line(e)}"))
            eps = []
        for ep in sorted(eps, key=lambda ep: ep.name):
            package = _package_of(ep)
            names, error = _load_one(ep)
            _PLUGINS["plugins"].append((ep.name, package, names, error))
            for n in names:
                _PLUGINS["source"][n] = f"plugin {ep.name} ({package})"
    return list(_PLUGINS["plugins"])


def check_plugins():
    """:func:`load_plugins`, raising :class:`PluginError` (one line: the plugin, its package,
    the reason) if an installed plugin cannot be loaded."""
    for name, package, _, error in load_plugins():
        if error is not None:
            raise PluginError(f"plugin '{name}' (package {package}) cannot be loaded: {error} "
                              f"(fix or uninstall that package)")


def plugin_source(name):
    """``"plugin <entry point> (<package> <version>)"`` for a class a plugin registered, else None."""
    return _PLUGINS["source"].get(name)


def plugin_summary():
    """One line about the installed plugins, for ``distnet info``: each with its package and
    classes, or why it cannot be loaded; ``none`` without plugins. Never raises."""
    out = []
    for name, package, names, error in load_plugins():
        what = f"cannot be loaded: {error}" if error else ", ".join(names) or "no classes"
        out.append(f"{name} ({package}): {what}")
    return "; ".join(out) or "none"
