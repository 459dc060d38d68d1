"""``distnet distribute``: apply neon's recipe for distributing an experiment to YAML text,
keeping its comments and layout: ``dist_flag: True`` on the experiment and its datasets, the
``Dist`` class of the model and of every layer, and ``{rank}``/``{size}`` in dataset shard paths.
"""
import re

import yaml

from ..config.registry import known_classes
from ..errors import ConfigError

_MODEL_DIST = {"MLP": "ConvnetDist", "Convnet": "ConvnetDist", "GB": "GBDist"}


def _dist_names():
    names = {n for n, *_ in known_classes()}
    return {n: n + "Dist" for n in names if n + "Dist" in names}


def _walk(node):
    yield node
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            yield from _walk(k)
            yield from _walk(v)
    elif isinstance(node, yaml.SequenceNode):
        for v in node.value:
            yield from _walk(v)


def _get(node, key):
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return v
    return None


def distribute_text(text, filename="<string>"):
    """The distributed version of experiment ``text`` (a string), comments preserved."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        raise ConfigError(f"malformed YAML: {e}", filename) from None
    if root is None or not root.tag.startswith("!obj:"):
        raise ConfigError("the root must be an !obj: experiment", filename)
    layer_dist = _dist_names()
    edits = []  # (start, end, replacement), applied from the end

    paths = {n: (d, p) for n, _, d, p in known_classes()}

    def retag(node, mapping):
        """Swap the class for its Dist class, written the way the file wrote it (neon path,
        distnet path or bare name)."""
        tag = node.tag[len("!obj:"):]
        name = tag.rpartition(".")[2]
        new = mapping.get(name)
        if not new:
            return
        dpath, npath = paths[name]
        new_d, new_n = paths[new]
        if tag == npath and new_n:
            path = new_n
        elif tag in (dpath, npath):
            path = new_d
        else:
            path = new
        start = text.index("!obj:" + tag, node.start_mark.index)
        edits.append((start, start + len("!obj:" + tag), "!obj:" + path))

    def set_flag(node):
        old = _get(node, "dist_flag")
        if old is not None:
            edits.append((old.start_mark.index, old.end_mark.index, "True"))
        elif node.flow_style:
            brace = text.index("{", node.start_mark.index)
            after = text[brace + 1:brace + 2]
            sep = "" if after in (" ", "\n", "\r") else " "   # keep `{repo_path: ...}` readable
            edits.append((brace + 1, brace + 1, " dist_flag: True," + sep))
        else:
            first = node.value[0][0]
            col = first.start_mark.column
            edits.append((first.start_mark.index, first.start_mark.index, "dist_flag: True\n" + " " * col))

    set_flag(root)
    datasets = _get(root, "datasets")
    for ds in (datasets.value if isinstance(datasets, yaml.SequenceNode) else []):
        set_flag(ds)
        sp = _get(ds, "serialized_path")
        if sp is not None and not re.search(r"\{rank\}|<rank>", sp.value):
            base, dot, ext = sp.value.rpartition(".")
            value = f"{base}-{{rank}}of{{size}}.{ext}" if dot else sp.value + "-{rank}of{size}"
            edits.append((sp.start_mark.index, sp.end_mark.index, repr(value)))
    model = _get(root, "model")
    if model is not None:
        retag(model, _MODEL_DIST)
        layers = _get(model, "layers")
        for layer in (layers.value if isinstance(layers, yaml.SequenceNode) else []):
            if layer.tag.startswith("!obj:"):
                retag(layer, layer_dist)
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text
