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
        short = _short(text)
        _set(tree, _dataset_spelling(tree, keys), value, f"--set {short}", f"override {short!r}")
    return tree


def apply_settings(tree, settings):
    """Apply what run options set, ``[(option as given, "a.b", value), ...]`` (``("--watchdog
    30", "watchdog", 30.0)``), to a parsed experiment tree (in place), after the overrides;
    returns the tree. The value is taken as it is (not YAML text), and a mapping on the path
    that the file does not have is created (``--checkpoint-every 2`` on a file without a
    ``checkpoint`` key); errors of the value name the option."""
    for option, path, value in settings:
        _set(tree, _dataset_spelling(tree, path.split(".")), value, option, option, create=True)
    return tree


def _set(tree, keys, value, source, label, create=False):
    """Set the value at ``keys`` of ``tree``; ``source`` is what messages about the key say
    set it (``command line SOURCE``), ``label`` what a bad path's message quotes; ``create``:
    make the mappings missing on the path."""
    node = tree
    for depth, key in enumerate(keys):
        last = depth == len(keys) - 1
        here = ".".join(keys[:depth]) or "the experiment"
        if isinstance(node, ObjSpec):
            if last or (create and node.kwargs.get(key) is None):
                node.kwargs[key] = value if last else {}
                node.key_where[key] = f"command line {source}"
            elif key not in node.kwargs:
                raise ConfigError(f"{label}: {here} ({node.path}) has no key '{key}'", node.where)
            children = node.kwargs
        elif isinstance(node, dict):
            if last or (create and node.get(key) is None):
                node[key] = value if last else {}
            elif key not in node:
                raise ConfigError(f"{label}: {here} has no key '{key}'", "command line")
            children = node
        elif isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                raise ConfigError(f"{label}: {here} is a list of {len(node)} items; "
                                  f"'{key}' is not an index", "command line")
            key = int(key)
            if last:
                node[key] = value
            children = node
        else:
            raise ConfigError(f"{label}: {here} is a value, not a mapping or list", "command line")
        if not last:
            node = children[key] = _own(children[key])
