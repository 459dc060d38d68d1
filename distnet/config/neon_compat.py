"""neon's later experiment schema (the ``examples/distributed`` files of Jan/Feb 2015), translated
into distnet's keys on the parsed tree, before anything is built.

The translation only rewrites :class:`~distnet.config.yaml_loader.ObjSpec` nodes; it imports no
class and builds nothing. Every spelling it accepts is listed here, so no dotted path from a file
is ever imported. What it does (each item only where the file uses that spelling):

* experiment ``dataset: X`` (singular) -> ``datasets: [X]``;
* model ``dist_mode`` -> checked against the dataset's ``dist_mode`` and dropped;
* ``weight_init: !obj:params.UniformValGen / GaussianValGen / NodeNormalizedValGen {...}`` ->
  the mapping ``{type: uniform | gaussian | node_normalized, ...}`` (``backend`` dropped);
* per-layer ``learning_rule: !obj:neon.models.learning_rule.GradientDescent /
  GradientDescentMomentum / GradientDescentPretrain {name, lr_params: {...}}`` ->
  ``learning_rate`` (and ``pretrain_learning_rate``) on the layer, and the layer's own momentum
  schedule (``momentum_params``; none for GradientDescent / GradientDescentPretrain), which the
  model uses instead of its own ``momentum`` for that layer;
* a ``Layer`` / ``LayerDist`` whose ``weight_init`` is one of those generators follows that
  neon's rule: it has a bias only if the generator gives ``bias_init`` (then its ``nin``,
  written without the bias, gets distnet's +1), otherwise it is a ``LayerWithNoBias(Dist)``;
* ``olayer`` on costs (the layer the cost reads: always the last one, or for ``pretrain_cost``
  the pretrained layer) -> dropped;
* ``dist_mode: datapar`` datasets with their own ``batch_size`` (the *global* minibatch; neon's
  model ``batch_size`` was one process's share of it) -> the model's ``batch_size`` becomes the
  dataset's, with a note in the log; ``num_test_sample`` is kept (the dataset takes the first
  that many test images);
* pooling layers' ``nfm`` / ``pshape`` (neon 0.4's cuda-convnet example) -> ``nifm`` / ``fshape``;
* ``neon.backends.fixedpoint.FixedPoint``'s format keys -> dropped with a warning (distnet
  computes in float32), and a model ``serialized_path`` -> a warning that it is ignored.

Notes and warnings are collected as ``(logging level, text)`` in the ``notes`` list given to
:func:`translate`; the experiment logs them when it runs (rank 0) and ``distnet check`` prints them.
"""
import logging

from ..errors import ConfigError
from .types import MOMENTUM
from .yaml_loader import ObjSpec

WARNING, INFO = logging.WARNING, logging.INFO

#: weight generators of neon's ``params`` package -> distnet's ``weight_init`` type and keys.
_VALGENS = {"UniformValGen": ("uniform", {"low", "high"}),
            "GaussianValGen": ("gaussian", {"loc", "scale"}),
            "NormalValGen": ("gaussian", {"loc", "scale"}),
            "NodeNormalizedValGen": ("node_normalized", {"scale"})}
_VALGEN_PATHS = {f"{pkg}{name}": name for name in _VALGENS for pkg in ("params.", "neon.params.",
                                                                       "neon.params.val_init.")}

#: learning rules of ``neon.models.learning_rule``.
_RULES = ("GradientDescent", "GradientDescentMomentum", "GradientDescentPretrain")
_RULE_PATHS = {f"{pkg}{name}": name for name in _RULES
               for pkg in ("neon.models.learning_rule.", "learning_rule.")}

#: distnet's own learning rules (a model's ``learning_rule``, docs/modern.md): not neon's schema,
#: left alone (``!obj:distnet.learning_rules.Adam`` or the bare class name).
_DISTNET_RULES = ("GradientDescent", "Adam", "AdamW")


def _distnet_rule(rule):
    return isinstance(rule, ObjSpec) and (rule.path.startswith("distnet.learning_rules.")
                                          or rule.path in _DISTNET_RULES)


_FIXEDPOINT_PATHS = ("neon.backends.fixedpoint.FixedPoint", "neon.backends.flexpoint.FlexPoint")
_FIXEDPOINT_KEYS = ("sign_bit", "int_bits", "frac_bits", "overflow", "rounding", "default_dtype")

_BIASED_LAYERS = {"Layer": "LayerWithNoBias", "LayerDist": "LayerWithNoBiasDist"}


def _bare(path):
    return path.rsplit(".", 1)[-1]


def _renamed(path, new_bare):
    """``path`` with its class name replaced (keeps the package, so it resolves as before)."""
    head, _, _ = path.rpartition(".")
    return f"{head}.{new_bare}" if head else new_bare


class _Translator:
    def __init__(self, notes):
        self.notes = notes
        self.done = set()       # ids of the ObjSpecs already translated (aliases: once)
        self.valgens = {}       # id of a params.*ValGen node -> its weight_init mapping

    def note(self, level, where, text):
        self.notes.append((level, f"{where}: {text}"))

    # -- the whole tree -----------------------------------------------------------------------
    def experiment(self, root):
        kw = root.kwargs
        if "dataset" in kw:
            if "datasets" in kw:
                raise ConfigError("give either dataset (neon's later spelling) or datasets, not both",
                                  root.where_of("dataset"), "dataset")
            kw["datasets"] = [kw.pop("dataset")]
            root.key_where["datasets"] = root.key_where.pop("dataset", root.where)
        for node in _walk(root):
            if isinstance(node, ObjSpec) and id(node) not in self.done:
                self.done.add(id(node))
                self.obj(node)
        model = kw.get("model")
        datasets = kw.get("datasets")
        if isinstance(model, ObjSpec) and isinstance(datasets, list) and len(datasets) == 1 \
                and isinstance(datasets[0], ObjSpec):
            self.model_and_dataset(model, datasets[0])
        return root

    def obj(self, spec):
        kw = spec.kwargs
        if spec.path in _FIXEDPOINT_PATHS:
            dropped = [k for k in _FIXEDPOINT_KEYS if k in kw]
            for k in dropped:
                del kw[k]
            self.note(WARNING, spec.where, f"{_bare(spec.path)} backend: distnet computes in float32 "
                      "numpy; the fixed-point format" + (f" ({', '.join(dropped)})" if dropped else "")
                      + " is ignored")
        for key in ("cost", "pretrain_cost"):
            cost = kw.get(key)
            if isinstance(cost, ObjSpec):
                cost.kwargs.pop("olayer", None)
        if "Pooling" in _bare(spec.path):
            # neon's cuda-convnet example (mnist_cudanet_cnn) spelled pooling keys nfm / pshape
            for old, new in (("nfm", "nifm"), ("pshape", "fshape")):
                if old in kw and new not in kw:
                    kw[new] = kw.pop(old)
                    spec.key_where[new] = spec.key_where.pop(old, spec.where)
        if "learning_rule" in kw and not _distnet_rule(kw["learning_rule"]):
            self.learning_rule(spec)
        wi = kw.get("weight_init")
        if isinstance(wi, ObjSpec) and wi.path in _VALGEN_PATHS:
            self.valgen_layer(spec, wi)

    # -- layers ---------------------------------------------------------------------------------
    def learning_rule(self, spec):
        rule = spec.kwargs.pop("learning_rule")
        where = spec.where_of("learning_rule")
        spec.key_where.pop("learning_rule", None)
        if not isinstance(rule, ObjSpec) or rule.path not in _RULE_PATHS:
            shown = f"!obj:{rule.path}" if isinstance(rule, ObjSpec) else repr(rule)
            raise ConfigError(f"learning_rule must be one of neon's {', '.join(_RULES)} "
                              f"(!obj:neon.models.learning_rule.<name>), got {shown}", where, "learning_rule")
        kind = _RULE_PATHS[rule.path]
        params = rule.kwargs.get("lr_params")
        if not isinstance(params, dict):
            raise ConfigError(f"{kind} needs lr_params: {{learning_rate: ...}}", rule.where, "lr_params")
        unknown = set(params) - {"learning_rate", "pretrain_learning_rate", "momentum_params", "backend",
                                 "weight_decay", "schedule"}
        unknown |= set(rule.kwargs) - {"name", "lr_params", "param_dtype", "gradient_dtype"}
        if unknown:
            raise ConfigError(f"{kind}: unknown key(s) {sorted(unknown)}", rule.where, "lr_params")
        if params.get("weight_decay"):
            raise ConfigError(f"{kind}: weight_decay is not supported by distnet", rule.where, "lr_params")
        if params.get("schedule"):
            raise ConfigError(f"{kind}: a learning-rate schedule is not supported by distnet",
                              rule.where, "lr_params")
        if "learning_rate" not in params:
            raise ConfigError(f"{kind} needs lr_params.learning_rate", rule.where, "lr_params")
        spec.kwargs["learning_rate"] = params["learning_rate"]
        spec.key_where["learning_rate"] = where
        if kind == "GradientDescentPretrain":
            if "pretrain_learning_rate" not in params:
                raise ConfigError("GradientDescentPretrain needs lr_params.pretrain_learning_rate",
                                  rule.where, "lr_params")
            spec.kwargs["pretrain_learning_rate"] = params["pretrain_learning_rate"]
            spec.key_where["pretrain_learning_rate"] = where
        momentum = None
        if kind == "GradientDescentMomentum":
            momentum = params.get("momentum_params")
            if not isinstance(momentum, dict) or "type" not in momentum:
                raise ConfigError("GradientDescentMomentum needs lr_params.momentum_params "
                                  "{type: constant | linear_monotone, ...}", rule.where, "lr_params")
            try:    # here, where the file's line is known (the schedule is built at set-up)
                momentum = MOMENTUM.coerce(momentum)
            except ValueError as e:
                raise ConfigError(f"{kind}: momentum_params: {e}", rule.where, "lr_params") from None
            if momentum.get("type") == "constant" and "coef" not in momentum:
                # neon's constant momentum used initial_coef when coef was absent
                momentum["coef"] = momentum.get("initial_coef", 0.0)
        # the layer's own schedule (plain gradient descent: no momentum for this layer)
        spec.attrs["momentum_params"] = momentum if momentum is not None else {"type": "constant", "coef": 0.0}

    def valgen_layer(self, spec, wi):
        spec.kwargs["weight_init"] = wi = self.valgen(wi)
        bare = _bare(spec.path)
        if bare not in _BIASED_LAYERS:
            return
        if "bias_init" in wi:
            nin = spec.kwargs.get("nin")
            if isinstance(nin, int) and not isinstance(nin, bool):
                spec.kwargs["nin"] = nin + 1  # neon 2015 wrote nin without the bias row
        else:  # neon 2015: a Layer without bias_init has no bias
            spec.path = _renamed(spec.path, _BIASED_LAYERS[bare])

    def valgen(self, wi):
        """A ``params.*ValGen`` node as distnet's weight_init mapping (one dict per node, so
        aliased generators stay one object)."""
        if id(wi) in self.valgens:
            return self.valgens[id(wi)]
        name = _VALGEN_PATHS[wi.path]
        kind, keys = _VALGENS[name]
        out = {"type": kind}
        for k, v in wi.kwargs.items():
            if k == "backend":
                continue
            if k not in keys | {"bias_init"}:
                raise ConfigError(f"unknown key for {name}; valid keys: {', '.join(sorted(keys | {'bias_init'}))}",
                                  wi.where_of(k), k)
            out[k] = v
        self.valgens[id(wi)] = out
        return out

    # -- model and dataset ----------------------------------------------------------------------
    def model_and_dataset(self, model, dataset):
        mkw, dkw = model.kwargs, dataset.kwargs
        if "serialized_path" in mkw:
            self.note(WARNING, model.where_of("serialized_path"),
                      "the model's serialized_path is accepted and ignored: distnet neither reads nor "
                      "writes neon's model pickle (it writes checkpoint.h5 in the run directory; "
                      "`distnet run --resume` continues from one)")
        mode = _mode(dkw.get("dist_mode"))
        if "dist_mode" in mkw:
            mmode = _mode(mkw.pop("dist_mode"))
            where = model.key_where.pop("dist_mode", model.where)
            if mmode != mode:
                raise ConfigError(f"the model has dist_mode {mmode} but its dataset has "
                                  f"{mode or 'none'}; they must agree (the dataset's decides)",
                                  where, "dist_mode")
        if "batch_size" in dkw:
            where = dataset.where_of("batch_size")
            bs = dkw.pop("batch_size")
            dataset.key_where.pop("batch_size", None)
            if mode != "datapar":
                self.note(WARNING, where, "a dataset's batch_size is only used with dist_mode: datapar "
                          "(the global minibatch); ignored, the model's batch_size is used")
            elif (model.key_where.get("batch_size", "").startswith("command line")
                  and not where.startswith("command line")):
                self.note(INFO, where, f"neon datapar: the dataset's batch_size {bs} (the global "
                          f"minibatch) gives way to {model.key_where['batch_size']}")
            elif isinstance(bs, int) and not isinstance(bs, bool):
                old = mkw.get("batch_size")
                mkw["batch_size"] = bs
                model.key_where["batch_size"] = where
                if old != bs:
                    self.note(INFO, where, f"neon datapar: the dataset's batch_size {bs} is the global "
                              f"minibatch and the model's batch_size {old} was one process's share of "
                              f"it; distnet's batch_size is global, so the model uses {bs} on any "
                              "number of ranks (the gradient is the mean over those images, as in neon)")
            else:
                raise ConfigError(f"expected an integer, got {bs!r}", where, "batch_size")


def _mode(value):
    if isinstance(value, str):
        return value.strip().lower()
    return {0: "halopar", 1: "vecpar", 2: "datapar"}.get(value, value)


def _walk(value, seen=None):
    """Every node of the tree once (aliases are shared nodes), parents before children."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    if isinstance(value, (ObjSpec, list, dict)):
        seen.add(id(value))
    yield value
    children = (value.kwargs.values() if isinstance(value, ObjSpec) else
                value.values() if isinstance(value, dict) else value if isinstance(value, list) else ())
    for child in list(children):
        yield from _walk(child, seen)


def translate(tree, notes):
    """Rewrite neon's later spellings in the parsed experiment ``tree`` (in place) and return it;
    appends ``(level, text)`` notes to ``notes``."""
    if isinstance(tree, ObjSpec):
        _Translator(notes).experiment(tree)
    return tree
