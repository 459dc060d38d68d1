"""Command-line overrides ``key.path=value`` (``distnet run EXP --set model.num_epochs=1``).

The path walks the parsed experiment: mapping keys of ``!obj:`` nodes and plain mappings, list
items by index (``model.layers.0.nofm=8``; ``dataset.K`` and ``datasets.0.K`` are one key, in
files of either spelling). The value is YAML (``1``, ``0.5``, ``1e-3``,
``[2, 3]``, ``float64``), with YAML 1.2's numbers as in files, and no ``!obj:`` objects. An override may add a key the
file does not set; the result is validated like the file itself. An override changes the one
place its path names, also inside a mapping or list the file shares through an alias
(``weight_init: *wt``); an aliased ``!obj:`` object stays one object.
"""
from ..errors import ConfigError
from .yaml_loader import ObjSpec, parse_scalar


def _short(text):
    """An override as quoted in messages: at most 80 characters."""
    return text if len(text) <= 80 else text[:77] + "..."


def parse_override(text):
    """``"a.b=1"`` -> ``(["a", "b"], 1)``."""
    short = _short(text)
    if "=" not in text:
        raise ConfigError(f"override {short!r} must look like key.path=value", "command line")
    path, _, raw = text.partition("=")
    keys = [k for k in path.strip().split(".") if k]
    if not keys:
        raise ConfigError(f"override {short!r} has no key path", "command line")
    if not raw.strip():
        return keys, None
    try:
        value = parse_scalar(raw)
    except ConfigError as e:
        if "!obj:" in raw:
            raise ConfigError(f"override {short!r}: --set takes plain YAML values (numbers, strings, lists, "
                              "mappings), not !obj: objects; edit the file to change an object",
                              "command line") from None
        raise ConfigError(f"override {short!r}: value is not valid YAML ({e.bare_message})",
                          "command line") from None
    return keys, value


def _dataset_spelling(tree, keys):
    """``dataset.K`` on a file with ``datasets: [one]`` means ``datasets.0.K``, and ``datasets.0.K``
    on a file with neon's later ``dataset:`` means ``dataset.K``: either spelling works."""
    if not isinstance(tree, ObjSpec) or len(keys) < 2:
        return keys
    kw = tree.kwargs
    if keys[0] == "dataset" and "dataset" not in kw and isinstance(kw.get("datasets"), list) \
            and len(kw["datasets"]) == 1:
        return ["datasets", "0"] + keys[1:]
    if keys[:2] == ["datasets", "0"] and "datasets" not in kw and "dataset" in kw and len(keys) > 2:
        return ["dataset"] + keys[2:]
    return keys


def _own(child):
    """The node an override walks into: a plain mapping or list is copied (shallow), so that one
    the file shares through an alias (``weight_init: *wt``) changes only on the path named; an
    ``!obj:`` node stays itself (an aliased object is one object, changed wherever it is used)."""
    if isinstance(child, dict):
        return dict(child)
    if isinstance(child, list):
        return list(child)
    return child


def apply_overrides(tree, overrides):
    """Apply ``["a.b=1", ...]`` to a parsed experiment tree (in place); returns the tree."""
    for text in overrides:
        keys, value = parse_override(text)
        keys = _dataset_spelling(tree, keys)
        short = _short(text)
        node = tree
        for depth, key in enumerate(keys):
            last = depth == len(keys) - 1
            here = ".".join(keys[:depth]) or "the experiment"
            if isinstance(node, ObjSpec):
                if last:
                    node.kwargs[key] = value
                    node.key_where[key] = f"command line --set {short}"
                elif key in node.kwargs:
                    child = node.kwargs[key] = _own(node.kwargs[key])
                    node = child
                else:
                    raise ConfigError(f"override {short!r}: {here} ({node.path}) has no key '{key}'", node.where)
            elif isinstance(node, dict):
                if last:
                    node[key] = value
                elif key in node:
                    child = node[key] = _own(node[key])
                    node = child
                else:
                    raise ConfigError(f"override {short!r}: {here} has no key '{key}'", "command line")
            elif isinstance(node, list):
                if not key.isdigit() or int(key) >= len(node):
                    raise ConfigError(f"override {short!r}: {here} is a list of {len(node)} items; "
                                      f"'{key}' is not an index", "command line")
                if last:
                    node[int(key)] = value
                else:
                    child = node[int(key)] = _own(node[int(key)])
                    node = child
            else:
                raise ConfigError(f"override {short!r}: {here} is a value, not a mapping or list", "command line")
    return tree
