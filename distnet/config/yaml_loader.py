"""Parse neon-style YAML into a tree of :class:`ObjSpec` nodes (no object is built here).

``!obj:dotted.Name {key: value, ...}`` becomes an :class:`ObjSpec` that remembers the class path,
its keyword arguments and the file/line of every key, so later errors can point at the YAML.
Anchors and aliases work as in YAML: an aliased ``!obj:`` node is the *same* ObjSpec (and so
becomes the same Python object).

Hostile files end with one located :class:`ConfigError`, never a hang or a traceback: nesting is
capped at :data:`MAX_DEPTH` levels, merge keys (``<<: [*a, *a, ...]``) keep one pair per key as
they are flattened (so nested merges cannot multiply), a recursive alias or an integer with too
many digits is malformed YAML, and a file that is not UTF-8 names the byte offset. Integers that
YAML 1.1 reads as another number than YAML 1.2 (base 60 ``1:30``, a leading zero ``010``) are
errors. Aliased nodes
are parsed once (PyYAML keeps one node per anchor) and built once (see ``builder.Builder``).
"""
import logging
import re

import yaml

from ..errors import ConfigError

#: Deepest nesting of mappings/sequences accepted (neon's own files nest about 6 levels deep).
MAX_DEPTH = 64


class ObjSpec:
    """One ``!obj:`` node: ``path`` (the dotted class name as written), ``kwargs`` (built values,
    nested ObjSpecs inside), ``where`` ("file:line" of the tag) and ``key_where`` (per key)."""

    #: ``(logging level, text)`` found while parsing (duplicate keys); the root's holds the file's.
    parse_notes = ()

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
    """A ``--set`` value: YAML (with YAML 1.2 numbers), like a value in a file, with the same
    limits (no ``!obj:`` tags here); :class:`ConfigError` when it is not valid YAML."""
    return parse_yaml(text, "command line", objects=False)


def _make_loader(filename, objects=True):
    class Loader(NumberLoader):
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
            _warn_duplicates(self, node, filename)
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
                loader.distnet_duplicates.append((f"{filename}:{key_node.start_mark.line + 1}", key,
                                                  f"in !obj:{tag_suffix} (also at {key_where[key]})"))
            kwargs[key] = loader.construct_object(value_node, deep=True)
            key_where[key] = f"{filename}:{key_node.start_mark.line + 1}"
        return ObjSpec(tag_suffix, kwargs, where, key_where)

    def construct_int(loader, node):
        try:
            value = yaml.SafeLoader.construct_yaml_int(loader, node)
        except ValueError as e:  # more digits than sys.get_int_max_str_digits()
            raise ConfigError(f"malformed YAML: integer {node.value[:20]}... : {e}",
                              f"{filename}:{node.start_mark.line + 1}") from None
        _refuse_yaml11_int(node.value, value, f"{filename}:{node.start_mark.line + 1}")
        return value

    Loader.add_constructor("tag:yaml.org,2002:int", construct_int)
    if objects:
        Loader.add_multi_constructor("!obj:", construct_obj)
    return Loader


def _warn_duplicates(loader, node, filename):
    """Record every scalar key written twice in the plain mapping ``node`` (see
    :func:`_judge_duplicates`); keys merged in with ``<<:`` may be overridden freely."""
    if not isinstance(node.tag, str) or node.tag.startswith("!obj:"):
        return   # !obj: mappings warn as they are constructed
    first = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        line = f"{filename}:{key.start_mark.line + 1}"
        if (key.tag, key.value) in first:
            loader.distnet_duplicates.append((line, key.value, f"(also at {first[(key.tag, key.value)]})"))
        first.setdefault((key.tag, key.value), line)


_LEADING_ZERO = re.compile(r"^[-+]?0[0-7_]+$")


def _refuse_yaml11_int(text, value, where):
    """YAML 1.1 integers that YAML 1.2 reads otherwise and that are rarely meant: base 60
    (``1:30`` is 90) and a leading zero (``010`` is octal 8). ConfigError at ``where``."""
    if ":" in text:
        raise ConfigError(f"{text!r} is a base-60 integer in YAML 1.1 (it reads as {value}); write the "
                          "number you mean, or quote it for a string", where)
    if _LEADING_ZERO.match(text):
        raise ConfigError(f"{text!r} has a leading zero, which YAML 1.1 reads as octal ({value}) and YAML "
                          f"1.2 as decimal; write {value} or {int(text.replace('_', ''), 10)} without it", where)


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


def parse_yaml(text, filename="<string>", objects=True):
    """YAML text -> python values with :class:`ObjSpec` for every ``!obj:`` node (``objects``
    False: plain YAML, an ``!obj:`` tag is an unknown tag).

    Raises :class:`ConfigError` naming the file and line for malformed YAML or unknown tags.
    """
    loader_class = _make_loader(filename, objects)
    notes = loader_class.distnet_notes = []
    duplicates = loader_class.distnet_duplicates = []
    try:
        tree = yaml.load(text, Loader=loader_class)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{filename}:{mark.line + 1}" if mark else filename
        what = " ".join(p for p in (e.context, e.problem) if p)
        raise ConfigError(f"malformed YAML: {what}{_placeholder_hint(text, e)}", where) from None
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
    notes += _judge_duplicates(tree, duplicates)
    if isinstance(tree, ObjSpec):
        tree.parse_notes = notes
    return tree


def _judge_duplicates(tree, duplicates):
    """A key given twice in one mapping is a ConfigError naming the first repeat's line: one
    of the two values is a typo or a stale line, and silently keeping either trains something
    other than what one of them says. Files written for neon itself (root class ``neon.*``) are
    the exception: neon's loader kept the later value without a word and neon's own example files
    rely on it (``mnist_datapar_gpu_mlp`` gives ``cost`` twice), so there the later value wins
    with a warning. Returns those warnings as ``(level, text)`` notes."""
    if not duplicates:
        return []
    if not (isinstance(tree, ObjSpec) and tree.path.startswith("neon.")):
        where, key, detail = duplicates[0]
        more = f"; {len(duplicates) - 1} more key(s) are given twice" if len(duplicates) > 1 else ""
        raise ConfigError(f"given twice {detail}: remove one of the two{more}", where, key)
    return [(logging.WARNING, f"{where}: key '{key}' is given twice {detail}; the later value is "
             "used, as neon's loader did") for where, key, detail in duplicates]


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
