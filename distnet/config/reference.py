"""The YAML reference, generated from the registry: every class with its paths, its keys (from
the constructor signature and ``config_types``) and its docstring. ``docs/yaml.md`` is this
module's output (``distnet check --reference``), and a test keeps the two in step."""
import inspect

from . import registry
from .builder import _ignored_of, _types_of, constructor_params
from .types import Bounded, MappingOf, Shape

_KIND_ORDER = ["experiment", "backend", "dataset", "model", "layer", "activation", "cost", "learning_rule",
               "schedule"]
_KIND_TITLE = {"experiment": "Experiments (the root object)", "backend": "Backends", "dataset": "Datasets",
               "model": "Models", "layer": "Layers", "activation": "Activations", "cost": "Costs",
               "learning_rule": "Learning rules (optimisers)", "schedule": "Learning-rate schedules"}


def _type_name(spec):
    if spec is None:
        return ""
    if isinstance(spec, (Bounded, Shape, MappingOf)):
        return spec.describe()
    if isinstance(spec, type):
        return {"int": "int", "float": "number", "bool": "bool", "str": "string", "dict": "mapping",
                "list": "list"}[spec.__name__]
    if spec == "shape2":
        return "int or [rows, cols]"
    if spec[0] == "obj":
        return f"!obj: {spec[1]}"
    if spec[0] == "list":
        return f"list of {_type_name(spec[1])}"
    return str(spec)


def _keys(cls):
    types = _types_of(cls)
    return [(p.name, _type_name(types.get(p.name)),
             "**required**" if p.default is inspect.Parameter.empty else f"`{p.default!r}`")
            for p in constructor_params(cls)]


#: The keys that take a plain mapping and whose own keys no class table lists (a test checks
#: these lists against the code that reads them: distnet/layers/params.py, distnet/optim/sgd.py).
MAPPINGS = """## Mappings: `weight_init` and `momentum`

### weight_init

Every layer with weights (`ConvLayer`, `Layer`, `LayerWithNoBias`, `LocalFilteringLayer`, and
their `Dist` aliases) needs one; it is drawn as neon drew it
([neon-semantics.md](neon-semantics.md#weight-initialisation-keys)), from the backend's
`rng_seed`, for the *global* weight array, so every grid starts from the same weights.

| `type` | keys (default) | draws |
| --- | --- | --- |
| `uniform` | `low` (0.0), `high` (1.0) | U[low, high); `low <= high` |
| `gaussian` or `normal` | `loc` (0.0), `scale` (1.0, >= 0) | N(loc, scale²) |
| `node_normalized` | `scale` (1.0, >= 0) | U[-a, a), a = scale · sqrt(6 / (sum of the weight array's dimensions)): Glorot's rule |

Every type also takes `bias_init` (a number: the bias column of a biased `Layer` is set to it;
other layers have no bias and ignore it) and `dtype` (the dtype of the draw before it is cast to
the backend's). Another `type` or key is an error at the line. Example:
`weight_init: {type: uniform, low: -0.1, high: 0.1}` (anchor it, `&wt`, and reuse it with `*wt`).

### momentum

The model's `momentum` (neon's key; with a `learning_rule`, give `momentum` to
`GradientDescent` instead) is a schedule of the coefficient mu(e) for the 0-based epoch e,
applied to every layer with weights (neon 0.4 applied it only to the biased `Layer`: see
[neon.md](neon.md)): `v <- mu(e) v - lr G`, `W <- W + v`.

| `type` | keys (default) | mu(e) |
| --- | --- | --- |
| `constant` | `coef` (0) | `coef` |
| `nesterov` | `coef` (0) | `coef`, with the Nesterov update `W <- W + mu v - lr G` |
| `linear_monotone` | `initial_coef`, `saturated_coef` (each default `coef`, default 0), `start_epoch`, `saturate_epoch` (>= `start_epoch`) | `initial_coef` before `start_epoch`, a linear ramp to `saturated_coef` at `saturate_epoch`, then `saturated_coef` (neon 0.4 ran this ramp backwards) |

Coefficients are numbers >= 0, epochs integers >= 0. Without `momentum` (and without a
`learning_rule`) training is plain SGD. Example:
`momentum: {type: linear_monotone, initial_coef: 0.5, saturated_coef: 0.9, start_epoch: 0, saturate_epoch: 10}`.
"""


def _backend_keys(kind_classes):
    """The docstring of the backends' common base class (its YAML keys), or ``""``."""
    for name, _, _ in kind_classes:
        cls, _ = registry.resolve(name)
        base = next((b for b in cls.__mro__ if b.__name__ == "Backend"), None)
        if base is not None:
            return _numpy_params_markdown(inspect.getdoc(base) or "")
    return ""


def _numpy_params_markdown(doc):
    """The ``Parameters`` section of a numpy-style docstring as a Markdown list (a ``----``
    underline would otherwise make a heading): ``* `key` (type, default): text``."""
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Parameters")), None)
    if start is None:
        return ""
    items = []
    for line in lines[start + 2:]:
        if not line.strip():
            continue
        if not line.startswith(" ") and " : " in line:
            key, kind = line.split(" : ", 1)
            items.append(f"* `{key.strip()}` ({kind.strip()}):")
        elif items:
            items[-1] += " " + line.strip()
    return "\n".join(items)


def reference_markdown():
    """Markdown text of the whole YAML reference."""
    out = ["# distnet YAML reference", "",
           "Generated by `distnet check --reference` from the class registry "
           "(`distnet/config/registry.py`); do not edit by hand.", "",
           "An experiment file has one root object, written `!obj:<class path> {key: value, ...}`. "
           "A class may be named by its distnet path, its bare name, or (where neon had it) neon's "
           "path. YAML anchors (`&name`) and aliases (`*name`) work; an aliased object is one object. "
           "Unknown classes or keys, wrong types and inconsistent shapes are errors that name the file, "
           "line and key. Shapes are global (whole images), also in distributed runs. Numbers follow "
           "YAML 1.2 (`1e-3`, `.5` are numbers; YAML 1.1's base-60 `1:30` and octal `010` are errors). `null` (`~`) means \"not given\" only for a key whose "
           "default is `None`; a required key, or one with another default, given `null` is an error "
           "(leave the key out for its default), and so is a `null` item in a list. A key given twice in one mapping is an error naming both lines "
           "(in a file written for neon, whose root class is `neon.*`, the later value wins with a warning, as "
           "neon's loader kept it silently). neon's later schema (`dataset:`, per-layer "
           "`learning_rule`, `weight_init: !obj:params.UniformValGen {...}`, `olayer`) is translated "
           "into these keys: see [neon.md](neon.md).", ""]
    by_kind = {}
    paths_of = {}
    for name, kind, dpath, npath in registry.known_classes():
        paths_of[name] = ", ".join(f"`{p}`" for p in dict.fromkeys((dpath, npath, *registry.extra_paths(name))) if p)
        # the reference documents distnet's own classes (not a plugin's, nor one a script
        # registered); an alias is listed under its class
        if registry.plugin_source(name) or registry.alias_of(name) or not dpath.startswith("distnet."):
            continue
        by_kind.setdefault(kind, []).append((name, dpath, npath))
    for kind in _KIND_ORDER:
        out += [f"## {_KIND_TITLE[kind]}", ""]
        if kind == "backend":
            common = _backend_keys(by_kind.get(kind, []))
            if common:
                out += ["Every backend takes these keys (`Backend`):", "", common, ""]
        for name, dpath, npath in sorted(by_kind.get(kind, [])):
            cls, _ = registry.resolve(name)
            out += [f"### {name}", "", f"Paths: {paths_of[name]}", ""]
            names = registry.aliases(name)
            if names:
                out += ["Aliases (neon's names of this class; messages print the name the file wrote): "
                        + "; ".join(f"**{a}** ({paths_of[a]})" for a in names), ""]
            doc = inspect.getdoc(cls) or ""
            if doc:
                out += [doc, ""]
            keys = _keys(cls)
            if keys:
                out += ["| key | type | default |", "| --- | --- | --- |"]
                out += [f"| `{k}` | {t} | {d} |" for k, t, d in keys]
                out.append("")
            ignored = sorted(_ignored_of(cls))
            if ignored:
                out += ["Accepted and ignored (neon compatibility): " + ", ".join(f"`{k}`" for k in ignored), ""]
    out += [MAPPINGS]
    return "\n".join(out).rstrip() + "\n"
