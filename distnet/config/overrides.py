"""Command-line overrides ``key.path=value`` (``distnet run EXP --set model.num_epochs=1``).

The path walks the parsed experiment: mapping keys of ``!obj:`` nodes and plain mappings, list
items by index (``model.layers.0.nofm=8``). The value is YAML (``1``, ``0.5``, ``[2, 3]``,
``float64``). An override may add a key the file does not set; the result is validated like
the file itself.
"""
from ..errors import ConfigError
from .yaml_loader import ObjSpec, parse_yaml


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
        value = parse_yaml(raw, "command line", objects=False)
    except ConfigError as e:
        raise ConfigError(f"override {short!r}: value is not valid YAML ({e.bare_message})",
                          "command line") from None
    return keys, value


def apply_overrides(tree, overrides):
    """Apply ``["a.b=1", ...]`` to a parsed experiment tree (in place); returns the tree."""
    for text in overrides:
        keys, value = parse_override(text)
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
                    node = node.kwargs[key]
                else:
                    raise ConfigError(f"override {short!r}: {here} ({node.path}) has no key '{key}'", node.where)
            elif isinstance(node, dict):
                if last:
                    node[key] = value
                elif key in node:
                    node = node[key]
                else:
                    raise ConfigError(f"override {short!r}: {here} has no key '{key}'", "command line")
            elif isinstance(node, list):
                if not key.isdigit() or int(key) >= len(node):
                    raise ConfigError(f"override {short!r}: {here} is a list of {len(node)} items; "
                                      f"'{key}' is not an index", "command line")
                if last:
                    node[int(key)] = value
                else:
                    node = node[int(key)]
            else:
                raise ConfigError(f"override {short!r}: {here} is a value, not a mapping or list", "command line")
    return tree
