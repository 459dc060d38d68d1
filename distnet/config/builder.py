"""Turn the :class:`ObjSpec` tree into objects: look each class up in the registry, check keys
and types against the class's constructor, and construct children before parents in document
order (the order matters for nothing random here, but it is neon's).

A class describes its YAML keys through its ``__init__`` signature (required = no default) and
an optional ``config_types`` mapping ``key -> spec`` (merged along the MRO), where spec is one of
``int``, ``float``, ``bool``, ``str``, ``dict``, ``list``, ``"shape2"`` (an int or a pair of ints),
``("obj", kind)`` or ``("list", ("obj", kind))``, or a constrained type of :mod:`.types`
(``PositiveInt``, ``NonNegative``, ``PositiveShape``, ``WEIGHT_INIT``, ...): sizes, rates and
ranges are checked here, at build time, so ``distnet check`` and every rank before training
refuse them with file:line:key. Every ``float`` must be finite. ``null`` is accepted only for
a key whose default is ``None`` (and never as an item of a list). A list of objects may not hold one
object twice (a layer reused through a YAML alias would be updated twice per step).
``config_ignored`` names neon keys that are accepted and dropped (with a note in the docs of that
class).
"""
import inspect
import logging

from ..errors import ConfigError, DistnetError
from . import registry
from .types import Bounded, MappingOf, Shape, check_finite, short_repr
from .types import describe as _describe_value
from .yaml_loader import ObjSpec

#: Most values a list or mapping may expand to, aliases followed (a whole experiment has ~100;
#: a string counts one per 64 characters).
MAX_VALUES = 100_000

_KIND_WORD = {"experiment": "an experiment", "backend": "a backend", "dataset": "a dataset",
              "model": "a model", "layer": "a layer", "activation": "an activation", "cost": "a cost",
              "learning_rule": "a learning rule", "schedule": "a schedule"}


def _types_of(cls):
    types = {}
    for klass in reversed(cls.__mro__):
        types.update(getattr(klass, "config_types", {}) or {})
    return types


def _ignored_of(cls):
    out = set()
    for klass in cls.__mro__:
        out |= set(getattr(klass, "config_ignored", ()) or ())
    return out


def _describe(value, kind_of=None):
    if isinstance(value, ObjSpec):
        return f"!obj:{value.path}"
    spec = getattr(value, "config_spec", None)    # an object built from the file
    if isinstance(spec, ObjSpec):
        kind = kind_of(value) if kind_of is not None else None
        return f"!obj:{spec.path}" + (f" ({_KIND_WORD[kind]})" if kind in _KIND_WORD else "")
    return _describe_value(value)


def coerce(spec, value, kind_of):
    """Check ``value`` against ``spec``; returns the (possibly normalised) value or raises
    ``ValueError`` with a sentence saying what was expected."""
    if value is None:
        return None
    if isinstance(spec, (Bounded, Shape, MappingOf)):
        return spec.coerce(value)
    if spec is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, got {_describe(value)}")
        return value
    if spec is float:
        return check_finite(value)
    if spec is bool:
        if not isinstance(value, bool):
            raise ValueError(f"expected True or False, got {_describe(value)}")
        return value
    if spec in (str, dict, list):
        if not isinstance(value, spec):
            raise ValueError(f"expected a {spec.__name__}, got {_describe(value)}")
        return value
    if spec == "shape2":
        if isinstance(value, int) and not isinstance(value, bool):
            return (value, value)
        if (isinstance(value, (list, tuple)) and len(value) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
            return tuple(value)
        raise ValueError(f"expected an integer or a pair [rows, cols] of integers, got {_describe(value)}")
    if isinstance(spec, tuple) and spec[0] == "obj":
        kind = kind_of(value)
        if kind != spec[1]:
            raise ValueError(f"expected {_KIND_WORD[spec[1]]} (!obj:...), got {_describe(value, kind_of)}")
        return value
    if isinstance(spec, tuple) and spec[0] == "list":
        if not isinstance(value, list):
            raise ValueError(f"expected a list, got {_describe(value)}")
        out, first = [], {}
        for i, v in enumerate(value):
            if v is None:
                raise ValueError(f"item {i}: expected {_item_word(spec[1])}, got null")
            try:
                out.append(coerce(spec[1], v, kind_of))
            except ValueError as e:
                raise ValueError(f"item {i}: {e}") from None
            if isinstance(spec[1], tuple) and spec[1][0] == "obj":
                if id(v) in first:
                    why = " (shared weights are not supported: write the layer twice)" if spec[1][1] == "layer" else ""
                    raise ValueError(f"item {i} is the same object as item {first[id(v)]} (a YAML alias); "
                                     f"each {spec[1][1]} must be its own object{why}")
                first[id(v)] = i
        return out
    raise AssertionError(f"unknown config type spec {spec!r}")


def _item_word(spec):
    """What an item of a list of ``spec`` must be, for messages."""
    if isinstance(spec, tuple) and spec[0] == "obj":
        return f"{_KIND_WORD[spec[1]]} (!obj:...)"
    if spec in (int, float, str):
        return {int: "an integer", float: "a number", str: "a string"}[spec]
    return str(spec)


def constructor_params(cls):
    """The YAML keys of ``cls`` as ``inspect.Parameter`` objects, in order: its ``__init__``
    parameters and, when that ends in ``**kwargs`` (passed on to the parent), the parent's too,
    up the MRO."""
    out, seen = [], set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters
        for n, p in params.items():
            if n != "self" and n not in seen and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                seen.add(n)
                out.append(p)
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            break
    return out


def constructor_keys(cls):
    """``(accepted, required)`` key sets of ``cls`` (see :func:`constructor_params`)."""
    params = constructor_params(cls)
    return ({p.name for p in params},
            {p.name for p in params if p.default is inspect.Parameter.empty})


class Builder:
    """Builds objects from a parsed experiment; aliased nodes become one object."""

    def __init__(self):
        self._memo = {}
        self._building = set()
        self._keep = []
        self._kinds = {}
        #: ``(logging level, text)`` for keys that are accepted and ignored (logged by the run).
        self.notes = []

    def kind_of(self, value):
        return self._kinds.get(id(value))

    def build(self, value, where=None, key=None):
        """The object of a parsed value. Every node (``!obj:``, list or mapping) is built once,
        memoised by identity: an aliased node is one object, and nine levels of nine aliases cost
        nine nodes, not 9**9 copies. A list or mapping whose expansion (what a reader walking it
        would visit, aliases followed) exceeds :data:`MAX_VALUES` values, or that contains itself,
        is refused. ``where``, ``key``: the file:line and name of the enclosing key, for errors."""
        return self._build(value, where, key)[0]

    def _build(self, value, where, key_name):
        """``(object, expanded size)`` of a parsed value (an ``!obj:`` counts as one value)."""
        if not isinstance(value, (ObjSpec, list, dict)):
            if isinstance(value, str) and "\x00" in value:   # no path, HDF5 name or log line holds one
                raise ConfigError(f"the string {short_repr(value)} holds a NUL character (\\x00)", where, key_name)
            return value, 1 + (len(value) // 64 if isinstance(value, str) else 0)
        key = id(value)
        if key in self._memo:
            return self._memo[key]
        if key in self._building:
            raise ConfigError("a value contains itself through an alias (recursive YAML)",
                              value.where if isinstance(value, ObjSpec) else where,
                              None if isinstance(value, ObjSpec) else key_name)
        self._building.add(key)
        try:
            if isinstance(value, ObjSpec):
                built, size = self._build_obj(value), 1
            else:
                items = value.items() if isinstance(value, dict) else enumerate(value)
                parts = [(k, self._build(v, where, key_name)) for k, v in items]
                size = 1 + sum(n for _, (_, n) in parts)
                if size > MAX_VALUES:
                    raise ConfigError(f"this value expands to more than {MAX_VALUES} values through "
                                      "YAML aliases (an alias bomb?)", where, key_name)
                built = ({k: b for k, (b, _) in parts} if isinstance(value, dict)
                         else [b for _, (b, _) in parts])
        finally:
            self._building.discard(key)
        self._memo[key] = (built, size)
        self._keep.append(value)  # ids stay unique while the memo lives
        return built, size

    def _build_obj(self, spec):
        cls, kind = registry.resolve(spec.path, spec.where)
        label = spec.path.rpartition(".")[2]   # the name the file wrote (an alias: not cls's)
        params = {p.name: p for p in constructor_params(cls)}
        accepted, required = constructor_keys(cls)
        ignored = _ignored_of(cls)
        types = _types_of(cls)
        kwargs = {}
        for key, raw in spec.kwargs.items():
            where = spec.where_of(key)
            if key in ignored:
                if key.endswith("_dtype"):
                    self.notes.append((logging.WARNING, f"{where}: key '{key}' of {label} is "
                                       "accepted and ignored (as neon did): every buffer has the "
                                       "backend's dtype"))
                continue
            if key not in accepted:
                if not accepted:
                    raise ConfigError(f"unknown key: {label} takes no keys (write {{}})", where, key)
                valid = ", ".join(sorted(accepted))
                raise ConfigError(f"unknown key for {label}; valid keys: {valid}", where, key)
            value = self.build(raw, where, key)
            if value is None:
                _check_null(params[key], where)
            if key in types:
                try:
                    value = coerce(types[key], value, self.kind_of)
                except ValueError as e:
                    raise ConfigError(str(e), where, key) from None
            kwargs[key] = value
        missing = sorted(required - set(kwargs))
        if missing:
            raise ConfigError(f"{label} needs key(s) {', '.join(missing)}", spec.where)
        try:
            obj = cls(**kwargs)
        except ConfigError as e:
            if e.where:
                raise
            raise ConfigError(e.bare_message, spec.where_of(e.key) if e.key else spec.where, e.key) from None
        except DistnetError as e:
            raise ConfigError(str(e), spec.where) from None
        except (TypeError, ValueError) as e:
            raise ConfigError(f"cannot build {label}: {e}", spec.where) from None
        try:
            obj.config_spec = spec
        except AttributeError:
            pass
        for name, value in spec.attrs.items():
            setattr(obj, name, value)
        self._kinds[id(obj)] = kind
        return obj


def _check_null(param, where):
    """``null`` (``~``, an empty value) stands for "not given" only where the default is ``None``;
    a required key, or one with another default, needs a value (ConfigError naming the key)."""
    if param.default is inspect.Parameter.empty:
        raise ConfigError("needs a value, got null", where, param.name)
    if param.default is not None:
        raise ConfigError(f"needs a value, got null (leave the key out for its default, "
                          f"{param.default!r})", where, param.name)


def config_where(obj, key=None):
    """``"file:line"`` of ``obj``'s YAML (or of its ``key``), None for an object not built from
    a file."""
    spec = getattr(obj, "config_spec", None)
    return (spec.where_of(key) if key else spec.where) if spec is not None else None


def config_given(obj, key):
    """Whether ``obj``'s YAML wrote ``key`` (False for an object not built from a file, and for
    a key left at its default)."""
    spec = getattr(obj, "config_spec", None)
    return spec is not None and key in spec.kwargs


def config_name(obj):
    """The class name ``obj``'s YAML wrote: the last component of its ``!obj:`` path (neon's
    ``ConvLayerDist``, an alias of ``ConvLayer``), or its class name for an object not built from
    a file. Messages and default layer names use it, so they say what the user wrote."""
    spec = getattr(obj, "config_spec", None)
    return spec.path.rsplit(".", 1)[-1] if spec is not None else type(obj).__name__


def config_error(obj, message, key=None):
    """A :class:`ConfigError` pointing at ``obj``'s YAML line (or ``key``'s line)."""
    return ConfigError(message, config_where(obj, key), key)
