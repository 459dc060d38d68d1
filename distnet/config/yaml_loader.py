"""Parse neon-style YAML into a tree of :class:`ObjSpec` nodes (no object is built here).

``!obj:dotted.Name {key: value, ...}`` becomes an :class:`ObjSpec` that remembers the class path,
its keyword arguments and the file/line of every key, so later errors can point at the YAML.
Anchors and aliases work as in YAML: an aliased ``!obj:`` node is the *same* ObjSpec (and so
becomes the same Python object).
"""
import logging
import re

import yaml

from ..errors import ConfigError


class ObjSpec:
    """One ``!obj:`` node: ``path`` (the dotted class name as written), ``kwargs`` (built values,
    nested ObjSpecs inside), ``where`` ("file:line" of the tag) and ``key_where`` (per key)."""

    def __init__(self, path, kwargs, where, key_where):
        self.path = path
        self.kwargs = kwargs
        self.where = where
        self.key_where = key_where
        #: Attributes set on the built object after construction (neon_compat's per-layer
        #: momentum schedule): not keys of the constructor.
        self.attrs = {}

    def where_of(self, key):
        return self.key_where.get(key, self.where)

    def __repr__(self):
        return f"ObjSpec({self.path!r} at {self.where})"


#: YAML 1.2's float rule (core schema): ``1e-3``, ``1E5``, ``.5``, ``-.5``, ``-1.5e+3`` are
#: numbers. PyYAML follows YAML 1.1, which needs a dot and a signed exponent (``1.0e-3``) and
#: leaves ``1e-3`` a string.
_FLOAT_12 = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")


def yaml12_numbers(cls):
    """Add YAML 1.2's float rule to a PyYAML Loader or Dumper class (a Dumper then quotes a
    string such as ``'1e3'``, which would read back as a number); returns the class."""
    cls.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))
    return cls


@yaml12_numbers
class NumberLoader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's float rule added (ints stay ints)."""


def parse_scalar(text):
    """A ``--set`` value: YAML (with YAML 1.2 numbers), like a value in a file."""
    return yaml.load(text, Loader=NumberLoader)  # noqa: S506 - SafeLoader subclass


def _make_loader(filename):
    class Loader(NumberLoader):
        pass

    def construct_obj(loader, tag_suffix, node):
        where = f"{filename}:{node.start_mark.line + 1}"
        if not isinstance(node, yaml.MappingNode):
            if isinstance(node, yaml.ScalarNode) and node.value == "":
                return ObjSpec(tag_suffix, {}, where, {})
            raise ConfigError(f"!obj:{tag_suffix} must be followed by a mapping of keyword arguments", where)
        kwargs, key_where = {}, {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise ConfigError(f"keys of !obj:{tag_suffix} must be strings, got {key!r}",
                                  f"{filename}:{key_node.start_mark.line + 1}")
            if key in kwargs:  # YAML loaders of neon's time kept the later value; so do we, loudly
                loader.distnet_notes.append((logging.WARNING, f"{filename}:{key_node.start_mark.line + 1}: "
                                             f"key '{key}' is given twice in !obj:{tag_suffix} (also at "
                                             f"{key_where[key]}); the later value is used"))
            kwargs[key] = loader.construct_object(value_node, deep=True)
            key_where[key] = f"{filename}:{key_node.start_mark.line + 1}"
        return ObjSpec(tag_suffix, kwargs, where, key_where)

    Loader.add_multi_constructor("!obj:", construct_obj)
    return Loader


_UNQUOTED_PLACEHOLDER = re.compile(
    r"""(^|[\s:,\[])([^\s'",\[\]{}]*\{(rank|size)\}(?:[^\s'",\[\]{}]|\{(?:rank|size)\})*)""")


def _placeholder_hint(text, error):
    """A hint when the lines of a YAML error hold an unquoted ``{rank}``/``{size}`` path: YAML
    reads ``{`` as the start of a mapping, so such a path must be quoted."""
    lines = text.splitlines()
    for mark in (error.problem_mark, error.context_mark):
        if mark is None or not 0 <= mark.line < len(lines):
            continue
        m = _UNQUOTED_PLACEHOLDER.search(lines[mark.line])
        if m:
            key = re.search(r"(\w+)\s*:\s*[^:]*$", lines[mark.line][:m.start(2)])
            example = f'{key.group(1) if key else "serialized_path"}: "{m.group(2)}"'
            return (f" -- hint: a path with {{{m.group(3)}}} must be quoted, because YAML reads "
                    f"'{{' as the start of a mapping: write {example}")
    return ""


def parse_yaml(text, filename="<string>"):
    """YAML text -> python values with :class:`ObjSpec` for every ``!obj:`` node.

    Raises :class:`ConfigError` naming the file and line for malformed YAML or unknown tags.
    """
    loader_class = _make_loader(filename)
    notes = loader_class.distnet_notes = []
    try:
        tree = yaml.load(text, Loader=loader_class)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{filename}:{mark.line + 1}" if mark else filename
        what = " ".join(p for p in (e.context, e.problem) if p)
        raise ConfigError(f"malformed YAML: {what}{_placeholder_hint(text, e)}", where) from None
    except yaml.YAMLError as e:
        raise ConfigError(f"malformed YAML: {e}", filename) from None
    if isinstance(tree, ObjSpec):
        #: ``(logging level, text)`` found while parsing (duplicate keys).
        tree.parse_notes = notes
    return tree


def parse_file(path):
    """Read and parse an experiment file (see :func:`parse_yaml`)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read experiment file: {e.strerror}", str(path)) from None
    return parse_yaml(text, str(path))
