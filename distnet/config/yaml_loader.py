"""Parse neon-style YAML into a tree of :class:`ObjSpec` nodes (no object is built here).

``!obj:dotted.Name {key: value, ...}`` becomes an :class:`ObjSpec` that remembers the class path,
its keyword arguments and the file/line of every key, so later errors can point at the YAML.
Anchors and aliases work as in YAML: an aliased ``!obj:`` node is the *same* ObjSpec (and so
becomes the same Python object).

Hostile files end with one located :class:`ConfigError`, never a hang or a traceback: nesting is
capped at :data:`MAX_DEPTH` levels, merge keys (``<<: [*a, *a, ...]``) keep one pair per key as
they are flattened (so nested merges cannot multiply), a recursive alias or an integer with too
many digits is malformed YAML, and a file that is not UTF-8 names the byte offset. Aliased nodes
are parsed once (PyYAML keeps one node per anchor) and built once (see ``builder.Builder``).
"""
import re

import yaml

from ..errors import ConfigError

#: Numbers in exponent notation that YAML 1.1 reads as strings (``1e-3``, ``1e6``, ``2.5E4``): read
#: as floats, as YAML 1.2 and every neon user expect.
_EXP_FLOAT = re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")

#: Deepest nesting of mappings/sequences accepted (neon's own files nest about 6 levels deep).
MAX_DEPTH = 64


class ObjSpec:
    """One ``!obj:`` node: ``path`` (the dotted class name as written), ``kwargs`` (built values,
    nested ObjSpecs inside), ``where`` ("file:line" of the tag) and ``key_where`` (per key)."""

    def __init__(self, path, kwargs, where, key_where):
        self.path = path
        self.kwargs = kwargs
        self.where = where
        self.key_where = key_where

    def where_of(self, key):
        return self.key_where.get(key, self.where)

    def __repr__(self):
        return f"ObjSpec({self.path!r} at {self.where})"


def _make_loader(filename, objects=True):
    class Loader(yaml.SafeLoader):
        _depth = 0

        def compose_node(self, parent, index):
            self._depth += 1
            try:
                if self._depth > MAX_DEPTH:
                    mark = self.peek_event().start_mark
                    raise ConfigError(f"YAML nested more than {MAX_DEPTH} levels deep",
                                      f"{filename}:{mark.line + 1}")
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def flatten_mapping(self, node):
            super().flatten_mapping(node)
            node.value = _last_of_each_key(node.value)

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
            if key in kwargs:
                raise ConfigError("duplicate key", f"{filename}:{key_node.start_mark.line + 1}", key)
            kwargs[key] = loader.construct_object(value_node, deep=True)
            key_where[key] = f"{filename}:{key_node.start_mark.line + 1}"
        return ObjSpec(tag_suffix, kwargs, where, key_where)

    def construct_int(loader, node):
        try:
            return yaml.SafeLoader.construct_yaml_int(loader, node)
        except ValueError as e:  # more digits than sys.get_int_max_str_digits()
            raise ConfigError(f"malformed YAML: integer {node.value[:20]}... : {e}",
                              f"{filename}:{node.start_mark.line + 1}") from None

    Loader.add_constructor("tag:yaml.org,2002:int", construct_int)
    Loader.add_implicit_resolver("tag:yaml.org,2002:float", _EXP_FLOAT, list("-+0123456789"))
    if objects:
        Loader.add_multi_constructor("!obj:", construct_obj)
    return Loader


def _last_of_each_key(pairs):
    """``[(key node, value node)]`` keeping, for each scalar key, its last pair (the one that wins
    when the mapping is constructed), in the order of those last pairs."""
    last = {}
    for i, (key, _) in enumerate(pairs):
        if isinstance(key, yaml.ScalarNode):
            last[(key.tag, key.value)] = i
    if len(last) == sum(isinstance(k, yaml.ScalarNode) for k, _ in pairs):
        return pairs
    return [(k, v) for i, (k, v) in enumerate(pairs)
            if not isinstance(k, yaml.ScalarNode) or last[(k.tag, k.value)] == i]


def parse_yaml(text, filename="<string>", objects=True):
    """YAML text -> python values with :class:`ObjSpec` for every ``!obj:`` node (``objects``
    False: plain YAML, an ``!obj:`` tag is an unknown tag).

    Raises :class:`ConfigError` naming the file and line for malformed YAML or unknown tags.
    """
    try:
        return yaml.load(text, Loader=_make_loader(filename, objects))  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{filename}:{mark.line + 1}" if mark else filename
        what = " ".join(p for p in (e.context, e.problem) if p)
        raise ConfigError(f"malformed YAML: {what}", where) from None
    except yaml.reader.ReaderError as e:  # a control character, e.g. NUL
        line = text.count("\n", 0, e.position) + 1 if isinstance(e.position, int) else None
        raise ConfigError(f"malformed YAML: unacceptable character #x{e.character:04x} "
                          "(special characters are not allowed)",
                          f"{filename}:{line}" if line else filename) from None
    except yaml.YAMLError as e:
        raise ConfigError(f"malformed YAML: {' '.join(str(e).split())}", filename) from None
    except ValueError as e:  # e.g. int() of a number with more than sys.get_int_max_str_digits()
        raise ConfigError(f"malformed YAML: {e}", filename) from None
    except RecursionError:  # a safety net: MAX_DEPTH keeps the composer far from the limit
        raise ConfigError(f"YAML nested too deeply (more than {MAX_DEPTH} levels)", filename) from None


def parse_file(path):
    """Read and parse an experiment file (see :func:`parse_yaml`)."""
    return parse_yaml(read_text(path), str(path))


def read_text(path):
    """The UTF-8 text of the experiment file ``path``; :class:`ConfigError` (with the line of the
    first bad byte) when it cannot be read or is not UTF-8."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read experiment file: {e.strerror or e}", str(path)) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"not a UTF-8 text file (byte 0x{raw[e.start]:02x} at offset {e.start}); "
                          "save the experiment as UTF-8", f"{path}:{line}") from None
