"""``distnet distribute``: apply neon's recipe for distributing an experiment to YAML text,
keeping its comments and layout: ``dist_flag: True`` on the experiment and its datasets, the
``Dist`` class of the model, neon's ``Dist`` name of every layer that has one (an alias: each
layer distributes itself, the name says so to a reader of neon's files), and
``{rank}``/``{size}`` in dataset shard paths.

``dist_mode`` picks how (the datasets' key of that name):

* ``halopar`` (default; the key is left as it is): spatial tiles with halo exchanges (MLP and
  Convnet become ConvnetDist, GB becomes GBDist);
* ``vecpar``: a fully connected MLP becomes MLPDist with LayerDist layers, each rank holding a
  block of every layer's input features (whole images in);
* ``datapar``: classes unchanged, every rank a data replica of whole images (a cache path
  still gets ``{rank}``: under mpiexec every rank writes its own).
"""
import re

import click
import yaml

from ..config.builder import constructor_params
from ..config.registry import check_plugins, known_classes, resolve
from ..errors import ConfigError
from .job import Job, fail
from .options import given_path

_MODEL_DIST = {"MLP": "ConvnetDist", "Convnet": "ConvnetDist", "GB": "GBDist"}
_MODEL_VECPAR = {"MLP": "MLPDist"}
DIST_MODES = ("halopar", "vecpar", "datapar")


def _dist_names():
    names = {n for n, *_ in known_classes()}
    return {n: n + "Dist" for n in names if n + "Dist" in names}


def _fully_connected(path, where):
    """Whether the YAML class ``path`` is a fully connected layer (any of its names)."""
    from ..layers.fc import FullyConnectedNoBiasLayer
    cls, _ = resolve(path, where)
    return isinstance(cls, type) and issubclass(cls, FullyConnectedNoBiasLayer)


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


def _check_root_takes_dist_flag(root, filename):
    """ConfigError (at the root's line) for an experiment class without ``dist_flag``: a
    ``Seq2SeqExperiment`` is distributed by its own ``pipe``/``data`` keys, and a file with
    ``dist_flag`` added would only be refused when run."""
    tag = root.tag[len("!obj:"):]
    where = f"{filename}:{root.start_mark.line + 1}"
    cls, _ = resolve(tag, where)
    keys = {p.name for p in constructor_params(cls)}
    if "dist_flag" in keys:
        return
    own = [k for k in ("pipe", "data") if k in keys]
    how = (f"it is distributed by its own key{'s' if len(own) > 1 else ''} "
           f"{' and '.join(f'`{k}`' for k in own)} (e.g. `pipe: 2`: the encoder and the decoder on "
           f"their own ranks; `data: D`: D replicas): set {'them' if len(own) > 1 else 'it'} in the file "
           f"and run it under mpiexec" if own else "it cannot be distributed")
    raise ConfigError(f"{cls.__name__} has no dist_flag, so neon's recipe does not apply: {how}", where)


class _Edits:
    """Edits of a YAML text, each ``(start, end, replacement)`` on the original text, applied from
    the end so that comments and layout stay as they were."""

    def __init__(self, text):
        self.text = text
        self.edits = []
        self.renamed = []     # the Dist classes written, in order
        self.shards = []      # the shard paths given {rank}/{size}
        self.paths = {n: (d, p) for n, _, d, p in known_classes()}

    def retag(self, node, mapping):
        """Swap the class for its Dist name, written the way the file wrote it (neon path,
        distnet path or bare name)."""
        tag = node.tag[len("!obj:"):]
        name = tag.rpartition(".")[2]
        new = mapping.get(name)
        if not new:
            return
        dpath, npath = self.paths[name]
        new_d, new_n = self.paths[new]
        path = new_n if tag == npath and new_n else new_d if tag in (dpath, npath) else new
        start = self.text.index("!obj:" + tag, node.start_mark.index)
        self.edits.append((start, start + len("!obj:" + tag), "!obj:" + path))
        self.renamed.append(new)

    def set_keys(self, node, pairs):
        """``key: value`` pairs in mapping ``node``: existing values replaced, missing keys added
        first, in one insertion (in the mapping's own style)."""
        missing = []
        for key, value in pairs:
            old = _get(node, key)
            if old is not None:
                self.edits.append((old.start_mark.index, old.end_mark.index, value))
            else:
                missing.append(f"{key}: {value}")
        if not missing:
            return
        if node.flow_style:
            brace = self.text.index("{", node.start_mark.index)
            after = self.text[brace + 1:brace + 2]
            sep = "" if after in (" ", "\n", "\r") else " "   # keep `{repo_path: ...}` readable
            self.edits.append((brace + 1, brace + 1, " " + ", ".join(missing) + "," + sep))
        else:
            first = node.value[0][0]
            col = first.start_mark.column
            self.edits.append((first.start_mark.index, first.start_mark.index,
                               "".join(f"{m}\n" + " " * col for m in missing)))

    def shard_path(self, dataset):
        """``{rank}of{size}`` in the dataset's ``serialized_path`` (unless it names the rank)."""
        sp = _get(dataset, "serialized_path")
        if sp is None or re.search(r"\{rank\}|<rank>", sp.value):
            return
        base, dot, ext = sp.value.rpartition(".")
        value = f"{base}-{{rank}}of{{size}}.{ext}" if dot else sp.value + "-{rank}of{size}"
        self.edits.append((sp.start_mark.index, sp.end_mark.index, repr(value)))
        self.shards.append(value)

    def applied(self):
        """The text with every edit made."""
        text = self.text
        for start, end, new in sorted(self.edits, reverse=True):
            text = text[:start] + new + text[end:]
        return text

    def report(self, dist_mode):
        """One line per kind of edit made."""
        lines = [f"dist_flag: True on the experiment and its dataset ({dist_mode})"]
        if self.renamed:
            counts = {n: self.renamed.count(n) for n in dict.fromkeys(self.renamed)}
            lines.append("classes: " + ", ".join(f"{n} x{c}" if c > 1 else n for n, c in counts.items()))
        if self.shards:
            lines.append("shard paths: " + ", ".join(self.shards))
        return lines


def _root(text, filename, dist_mode):
    """The composed root node of an experiment ``text`` that neon's recipe applies to."""
    if dist_mode not in DIST_MODES:
        raise ConfigError(f"dist_mode must be one of {', '.join(DIST_MODES)}, got {dist_mode!r}", filename)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        raise ConfigError(f"malformed YAML: {e}", filename) from None
    if root is None or not root.tag.startswith("!obj:"):
        raise ConfigError("the root must be an !obj: experiment", filename)
    check_plugins()  # a plugin's FooLayer becomes its FooLayerDist too
    _check_root_takes_dist_flag(root, filename)
    return root


def _check_vecpar(model, layers, filename):
    """ConfigError unless ``model`` is an MLP of fully connected ``layers`` (what vecpar shards)."""
    name = model.tag.rpartition(".")[2].replace("!obj:", "") if model is not None else None
    if name not in _MODEL_VECPAR:
        raise ConfigError(f"dist_mode vecpar distributes a fully connected MLP, not {name}",
                          f"{filename}:{model.start_mark.line + 1}" if model is not None else filename)
    spatial = [n for n in layers if not _fully_connected(n.tag[5:], f"{filename}:{n.start_mark.line + 1}")]
    if spatial:
        raise ConfigError(f"dist_mode vecpar shards fully connected layers; this model also has "
                          f"{', '.join(n.tag[5:].rpartition('.')[2] for n in spatial)} (use halopar)",
                          f"{filename}:{spatial[0].start_mark.line + 1}")


def _datasets(root):
    """The dataset mapping nodes: ``datasets: [...]``, or neon's later ``dataset:``."""
    datasets, single = _get(root, "datasets"), _get(root, "dataset")
    return ((datasets.value if isinstance(datasets, yaml.SequenceNode) else [])
            + ([single] if isinstance(single, yaml.MappingNode) else []))


def distribute_text(text, filename="<string>", dist_mode="halopar", report=None):
    """The distributed version of experiment ``text`` (a string), comments preserved;
    ``dist_mode`` one of :data:`DIST_MODES` (module docstring). ``report``: a list that gets
    one line per kind of edit made (for the command's summary)."""
    root = _root(text, filename, dist_mode)
    edits = _Edits(text)
    model = _get(root, "model")
    layers = _get(model, "layers") if model is not None else None
    layers = [n for n in (layers.value if isinstance(layers, yaml.SequenceNode) else []) if n.tag.startswith("!obj:")]
    if dist_mode == "vecpar":
        _check_vecpar(model, layers, filename)
    edits.set_keys(root, [("dist_flag", "True")])
    for ds in _datasets(root):
        edits.set_keys(ds, [("dist_flag", "True")] + ([("dist_mode", dist_mode)] if dist_mode != "halopar" else []))
        edits.shard_path(ds)
    if model is not None and dist_mode != "datapar":
        edits.retag(model, _MODEL_VECPAR if dist_mode == "vecpar" else _MODEL_DIST)
        layer_dist = _dist_names()
        for layer in layers:
            edits.retag(layer, layer_dist)
    if report is not None:
        report.extend(edits.report(dist_mode))
    return edits.applied()


@click.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), callback=given_path,
              help="Write here (default: stdout).")
@click.option("--dist-mode", type=click.Choice(["halopar", "vecpar", "datapar"]), default="halopar",
              show_default=True, help="halopar: spatial tiles; vecpar: an FC MLP as MLPDist (feature "
              "blocks); datapar: every rank a data replica of whole images.")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists (even SOURCE itself).")
def distribute(source, output, dist_mode, force):
    """Apply neon's recipe to SOURCE: dist_flag on the experiment and datasets, Dist classes,
    {rank}/{size} in shard paths. Comments and layout are kept. An existing OUTPUT is kept
    unless --force."""
    from ..fileio import refuse_existing, same_file, write_text
    with Job("distribute", one_process=True):
        try:
            if output:
                hint = "give another -o, or --force to replace it"
                refuse_existing(output, "output" + (" (the SOURCE itself)" if same_file(output, source) else ""),
                                force, hint)
            report = []
            with open(source, encoding="utf-8") as f:
                text = distribute_text(f.read(), source, dist_mode, report)
            if output:
                write_text(output, text, "output")
                click.echo(f"wrote {output}: " + "; ".join(report), err=True)
                click.echo(f"next: `distnet show {output} -n N` (the grid of N ranks, or the counts that work), "
                           f"`mpiexec -n N distnet run {output}`", err=True)
        except UnicodeDecodeError as e:
            fail(f"{source}: not UTF-8 text ({e.reason} at byte {e.start})")
        except OSError as e:
            fail(f"cannot read {source}: {e.strerror or e}", 1)
    if not output:
        click.echo(text, nl=False)
