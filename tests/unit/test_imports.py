"""The import rules of docs/design.md#layers-of-the-code, checked on the source (``ast``, no
module is imported).

Every module of ``distnet/`` is parsed and every import statement is read, including those
inside functions, plus the dynamic ones with a literal name (``__import__("x")``,
``importlib.import_module("x")``, ``importlib.util.find_spec("x")``) and look-ups of
``sys.modules["x"]`` / ``sys.modules.get("x")``, which reach a module without importing it.

The layers, top to bottom; a module imports only its own layer and the ones above it:

====  ===========  ==========================================================================
  0   foundation   ``distnet/__init__.py`` (version), ``errors.py``, ``log.py``, ``fileio.py``
                   (atomic writes): importable from everywhere, import nothing of distnet's
                   but each other
  1   config       ``distnet/config/``
  2   backend      ``distnet/backend.py``
  3   geometry     ``distnet/geometry/``
  4   comm         ``distnet/comm/``
  5   ops          ``distnet/ops/``
  5   optim        ``distnet/optim/`` (the optimisers: math on arrays like ops, on top of ops'
                   kernel launcher; ops never import optim)
  5   data         ``distnet/data/`` (the data engine: sources, read strategies, caches, ...)
  6   layers       ``distnet/layers/``
  6   datasets     ``distnet/datasets/`` (the dataset kinds a YAML names)
  7   models       ``distnet/models/``
  7   experiments  ``distnet/experiments/``, and the top-level modules that serve a run or a
                   plan of one: ``plan/`` (plans a model's layers on a grid), ``faults.py``
                   (fault injection into training steps) and ``progress.py`` (the progress bar
                   a run reports to). One level with models, but experiments sit on models:
                   experiments may import models, models never import experiments.
  8   convert      ``distnet/convert/`` (the converters of ``distnet data``)
  9   cli, api     ``distnet/cli/``, ``distnet/__main__.py``; ``distnet/api.py`` (the Python
                   interface for inference: :func:`distnet.api.load`), beside the command line
 10   testing      ``distnet/testing/``: the device-like array module, the CUDA emulation and
                   the test backends, for the tests, the benchmarks and the GPU check; above
                   every other layer, so no module of distnet's may import it
====  ===========  ==========================================================================

Two wings stand on comm: the model wing (ops, layers, models) and the data wing (data,
datasets). Neither imports the other, at any level; experiments import both and join them (a
model sees arrays, never a dataset; a dataset never sees a layer).

Also refused:

* mpi4py outside ``distnet/comm/`` (the CLI reaches MPI through :mod:`distnet.comm.launcher`);
* cupy outside ``distnet/backend.py`` (GPU facts for ``distnet info`` come from the backend);
* ``from x import _name``, or ``x._name`` after importing module ``x``, where ``x`` is in another
  package (a private name is private to its package: ``distnet.comm`` is one package,
  ``distnet.plan`` is one, ...).

And no import cycle: the graph of which distnet module imports which (every import statement,
module-level or inside a function, and the dynamic ones) has none, whatever the layers say
(two modules of one layer may import each other's names only one way).

Each violation reads ``file:line: imports X (layer A imports layer B)``. ``KNOWN`` lists the
violations that are waiting for a redesign of the files they are in; the test fails on any
violation not in it, and on any entry of it that no longer occurs (the list cannot go stale).
"""
import ast
from pathlib import Path

import distnet

PKG = Path(distnet.__file__).resolve().parent
ROOT = PKG.parent

FOUNDATION = {"distnet", "distnet.errors", "distnet.log", "distnet.fileio"}

# module prefix -> (level, layer name); the longest prefix wins.
LAYERS = {
    "distnet.config": (1, "config"),
    "distnet.backend": (2, "backend"),
    "distnet.geometry": (3, "geometry"),
    "distnet.comm": (4, "comm"),
    "distnet.ops": (5, "ops"),
    "distnet.optim": (5, "optim"),
    "distnet.data": (5, "data"),
    "distnet.layers": (6, "layers"),
    "distnet.datasets": (6, "datasets"),
    "distnet.models": (7, "models"),
    "distnet.experiments": (7, "experiments"),
    "distnet.plan": (7, "experiments"),
    "distnet.faults": (7, "experiments"),
    "distnet.progress": (7, "experiments"),
    "distnet.convert": (8, "convert"),
    "distnet.cli": (9, "cli"),
    "distnet.__main__": (9, "cli"),
    "distnet.api": (9, "api"),
    "distnet.testing": (10, "testing"),
}
# Same level, one direction only: (importer, imported) pairs that are refused.
SIDEWAYS_REFUSED = {("models", "experiments"), ("ops", "optim")}
# The wings of layers above comm (docstring): a layer of one wing never imports one of the other.
WINGS = {"ops": "model", "optim": "model", "layers": "model", "models": "model", "data": "data",
         "datasets": "data"}

# Third-party modules with one home.
HOMES = {"mpi4py": ("distnet.comm", "distnet/comm/"), "cupy": ("distnet.backend", "distnet/backend.py")}

# Violations waiting for the lead's redesign of the files they are in, as
# "file: imports X (...)" (the violation's text without its line number). Empty it as they go.
KNOWN = set()

DYNAMIC_IMPORTS = {"__import__", "import_module", "find_spec"}


def across_wings(importer, imported):
    """Whether layer ``importer`` and layer ``imported`` stand in different wings (:data:`WINGS`)."""
    return importer in WINGS and imported in WINGS and WINGS[importer] != WINGS[imported]


def module_name(path, root=ROOT):
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def layer_of(mod):
    """``(level, name)`` of a distnet module; level 0 for the foundation; None if unmapped."""
    if mod in FOUNDATION:
        return 0, "foundation"
    best = None
    for prefix, lay in LAYERS.items():
        if (mod == prefix or mod.startswith(prefix + ".")) and (best is None or len(prefix) > len(best)):
            best = prefix
    return LAYERS[best] if best else None


def package_of(mod):
    """``distnet.comm`` for ``distnet.comm.abort``; a top-level module is its own package."""
    parts = mod.split(".")
    return ".".join(parts[:2])


def _absolute(importer, is_package, node):
    """The module a ``from ... import`` names (relative levels resolved)."""
    if not node.level:
        return node.module
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _literal(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_sys_modules(node):
    return (isinstance(node, ast.Attribute) and node.attr == "modules" and isinstance(node.value, ast.Name)
            and node.value.id == "sys")


def imports_of(path, root=ROOT, lookups=True, modules=None):
    """``[(line, imported module, name or None)]`` of one file: statements anywhere in it and
    dynamic imports with a literal module name; with ``lookups``, also ``sys.modules`` look-ups
    (which reach a module without importing it). ``modules``: the package's module names
    (default: distnet's, :data:`MODULES`)."""
    modules = MODULES if modules is None else modules
    mod = module_name(path, root)
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(mod, is_package, node)
            for a in node.names:
                sub = f"{base}.{a.name}"
                # ``from distnet.cli import info`` imports the module distnet.cli.info
                out.append((node.lineno, sub if sub in modules else base, None if sub in modules else a.name))
        elif isinstance(node, ast.Call) and node.args:
            f = node.func
            fname = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            target = _literal(node.args[0])
            if target and (fname in DYNAMIC_IMPORTS or (lookups and fname == "get" and _is_sys_modules(f.value))):
                out.append((node.lineno, target, None))
        elif lookups and isinstance(node, ast.Subscript) and _is_sys_modules(node.value):
            target = _literal(node.slice)
            if target:
                out.append((node.lineno, target, None))
    return sorted(out)


def _is_private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_attributes_of(path, root=ROOT):
    """``[(line, module, name)]``: ``alias._name`` where ``alias`` is a distnet module this file
    imported (``from ..models import checkpoint`` ... ``checkpoint._umask_mode``)."""
    mod = module_name(path, root)
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.asname})
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(mod, path.name == "__init__.py", node)
            aliases.update({a.asname or a.name: f"{base}.{a.name}" for a in node.names
                            if f"{base}.{a.name}" in MODULES})
    return sorted((node.lineno, aliases[node.value.id], node.attr) for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id in aliases and _is_private(node.attr))


def violations_of(path, root=ROOT):
    """``[(line, text without the line)]`` of one file."""
    mod = module_name(path, root)
    rel = path.relative_to(root).as_posix()
    here = layer_of(mod)
    out = []
    for line, target, name in imports_of(path, root):
        top = target.split(".")[0]
        if top in HOMES:
            home, where = HOMES[top]
            if not (mod == home or mod.startswith(home + ".")):
                out.append((line, f"{rel}: imports {target} (only {where} may import {top})"))
            continue
        if top != "distnet":
            continue
        there = layer_of(target)
        if there is None:
            out.append((line, f"{rel}: imports {target} (not a distnet module)"))
            continue
        if here[0] and there[0] and (there[0] > here[0] or (here[1], there[1]) in SIDEWAYS_REFUSED
                                     or across_wings(here[1], there[1])):
            out.append((line, f"{rel}: imports {target} (layer {here[0]} {here[1]} imports layer "
                              f"{there[0]} {there[1]})"))
        elif here[0] == 0 and there[0]:
            out.append((line, f"{rel}: imports {target} (the foundation imports layer {there[0]} {there[1]})"))
        private = name if name and _is_private(name) else next(
            (p for p in target.split(".") if _is_private(p)), None)
        if private and package_of(target) != package_of(mod):
            out.append((line, f"{rel}: imports private name {private} from {target} "
                              f"({package_of(mod)} imports {package_of(target)})"))
    for line, target, name in private_attributes_of(path, root):
        if package_of(target) != package_of(mod):
            out.append((line, f"{rel}: uses private name {name} of {target} "
                              f"({package_of(mod)} uses {package_of(target)})"))
    return out


def all_violations():
    return [(MODULES[m].relative_to(ROOT).as_posix(), line, text)
            for m in MODULES for line, text in violations_of(MODULES[m])]


def test_every_module_has_a_layer():
    unmapped = [m for m in MODULES if layer_of(m) is None]
    assert not unmapped, ("modules with no layer (add them to LAYERS or FOUNDATION in "
                          f"tests/unit/test_imports.py, and to its docstring): {unmapped}")


def test_imports_follow_the_layers():
    found = all_violations()
    new = [f"{text.split(':', 1)[0]}:{line}:{text.split(':', 1)[1]}"
           for _, line, text in sorted(found) if text not in KNOWN]
    stale = sorted(KNOWN - {text for _, _, text in found})
    msg = []
    if new:
        msg.append("imports against docs/design.md#layers-of-the-code:\n  " + "\n  ".join(new))
    if stale:
        msg.append("KNOWN entries that no longer occur (remove them from KNOWN):\n  " + "\n  ".join(stale))
    assert not msg, "\n".join(msg)


def import_graph(root=ROOT):
    """``{module: {imported distnet module: (file, line) of its first import}}`` of the
    ``distnet`` package under ``root``. An imported name that is no module of its own stands for
    the module that defines it (``from distnet.comm import RemoteError``: ``distnet.comm``)."""
    modules = {module_name(p, root): p for p in sorted((root / "distnet").rglob("*.py"))}
    graph = {}
    for mod, path in modules.items():
        edges = graph.setdefault(mod, {})
        for line, target, _ in imports_of(path, root, lookups=False, modules=modules):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != mod and target not in edges:
                edges[target] = (path.relative_to(root).as_posix(), line)
    return graph


def import_cycles(graph):
    """One cycle ``[m0, m1, ..., m0]`` per group of modules that import each other, directly or
    through others (a strongly connected component, Tarjan's algorithm); ``[]`` if none."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_in(graph, group) for group in groups]


def _cycle_in(graph, group):
    """A shortest cycle through the first module of ``group`` (breadth first, inside it)."""
    start = min(group)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v]):
            if w == start:
                return paths[v] + [start]
            if w in group and w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    raise AssertionError(f"no cycle through {start} in {sorted(group)}")


def describe_cycle(graph, cycle):
    """``a (a.py:12) -> b (b.py:3) -> a``: each module with the line that imports the next."""
    return " -> ".join(f"{a} ({':'.join(map(str, graph[a][b]))})" for a, b in zip(cycle, cycle[1:])) + \
        f" -> {cycle[-1]}"


def test_no_import_cycle():
    graph = import_graph()
    cycles = import_cycles(graph)
    assert not cycles, "import cycles (each module with the line that imports the next):\n  " + \
        "\n  ".join(describe_cycle(graph, c) for c in cycles)


# --- the checker itself ---------------------------------------------------------------------

def _check(tmp_path, rel, source):
    """Violations of a made-up module ``distnet/<rel>`` written under ``tmp_path``."""
    fake = tmp_path / "distnet" / rel
    fake.parent.mkdir(parents=True, exist_ok=True)
    fake.write_text(source)
    return [t for _, t in violations_of(fake, tmp_path)]


def test_checker_sees_imports_inside_functions_and_relative_ones(tmp_path):
    v = _check(tmp_path, "ops/fake.py", "def f():\n    from ..layers import base\n    import distnet.cli.main\n")
    assert v == ["distnet/ops/fake.py: imports distnet.layers.base (layer 5 ops imports layer 6 layers)",
                 "distnet/ops/fake.py: imports distnet.cli.main (layer 5 ops imports layer 9 cli)"]


def test_checker_refuses_the_testing_helpers_in_the_product(tmp_path):
    assert _check(tmp_path, "cli/fake.py", "from ..testing import devicelike\n") == [
        "distnet/cli/fake.py: imports distnet.testing.devicelike (layer 9 cli imports layer 10 testing)"]
    assert _check(tmp_path, "testing/fake.py", "from ..models import Model\nfrom ..ops.cuda import launch\n") == []


def test_checker_allows_downward_and_foundation_imports(tmp_path):
    assert _check(tmp_path, "layers/fake.py",
                  "from ..comm.reduce import allreduce_sum\nfrom ..errors import ConfigError\n"
                  "from .. import __version__\nfrom .spatial import _pair\n") == []


def test_checker_refuses_models_importing_experiments_but_not_the_reverse(tmp_path):
    assert _check(tmp_path, "models/fake.py", "from ..experiments import fit\n") == [
        "distnet/models/fake.py: imports distnet.experiments.fit (layer 7 models imports layer 7 experiments)"]
    assert _check(tmp_path, "experiments/fake.py", "from ..models import mlp\nfrom ..plan import x\n") == []


def test_checker_keeps_the_wings_apart(tmp_path):
    """The data wing and the model wing never import each other; experiments join them; the
    engine never imports a dataset kind."""
    assert _check(tmp_path, "data/fake.py", "from ..ops import conv\nfrom ..datasets import base\n") == [
        "distnet/data/fake.py: imports distnet.ops.conv (layer 5 data imports layer 5 ops)",
        "distnet/data/fake.py: imports distnet.datasets.base (layer 5 data imports layer 6 datasets)"]
    assert _check(tmp_path, "datasets/fake.py", "from ..ops import conv\nfrom ..layers import base\n") == [
        "distnet/datasets/fake.py: imports distnet.ops.conv (layer 6 datasets imports layer 5 ops)",
        "distnet/datasets/fake.py: imports distnet.layers.base (layer 6 datasets imports layer 6 layers)"]
    assert _check(tmp_path, "models/fake.py", "from ..datasets import base\nfrom ..data import stream\n") == [
        "distnet/models/fake.py: imports distnet.datasets.base (layer 7 models imports layer 6 datasets)",
        "distnet/models/fake.py: imports distnet.data.stream (layer 7 models imports layer 5 data)"]
    assert _check(tmp_path, "experiments/fake.py", "from ..datasets import base\nfrom ..models import mlp\n"
                  "from ..data import reading\nfrom ..comm import root_read\n") == []
    assert _check(tmp_path, "datasets/fake.py", "from ..data import reading\nfrom ..comm import root_read\n") == []
    assert _check(tmp_path, "experiments/fake.py", "from ..convert import images\n") == [
        "distnet/experiments/fake.py: imports distnet.convert.images (layer 7 experiments imports layer 8 convert)"]


def test_checker_refuses_mpi4py_cupy_and_private_names(tmp_path):
    v = _check(tmp_path, "cli/fake.py", "import sys\nfrom mpi4py import MPI\nc = sys.modules.get('cupy')\n"
               "m = sys.modules['mpi4py.MPI']\nfrom ..models.checkpoint import _umask_mode\n"
               "__import__('cupy')\n")
    assert v == ["distnet/cli/fake.py: imports mpi4py (only distnet/comm/ may import mpi4py)",
                 "distnet/cli/fake.py: imports cupy (only distnet/backend.py may import cupy)",
                 "distnet/cli/fake.py: imports mpi4py.MPI (only distnet/comm/ may import mpi4py)",
                 "distnet/cli/fake.py: imports private name _umask_mode from distnet.models.checkpoint "
                 "(distnet.cli imports distnet.models)",
                 "distnet/cli/fake.py: imports cupy (only distnet/backend.py may import cupy)"]
    assert _check(tmp_path, "comm/fake.py", "from mpi4py import MPI\nfrom .global_array import _waitall\n") == []


def test_checker_refuses_private_attributes_of_modules_of_other_packages(tmp_path):
    v = _check(tmp_path, "experiments/fake.py", "from ..models import checkpoint\nimport distnet.comm.abort as ab\n"
               "from . import rundir\ncheckpoint._umask_mode(1)\nab._state\nrundir._now()\ncheckpoint.save\n")
    assert v == ["distnet/experiments/fake.py: uses private name _umask_mode of distnet.models.checkpoint "
                 "(distnet.experiments uses distnet.models)",
                 "distnet/experiments/fake.py: uses private name _state of distnet.comm.abort "
                 "(distnet.experiments uses distnet.comm)"]


def test_cycle_finder_sees_imports_inside_functions(tmp_path):
    for rel, source in (("__init__.py", ""), ("a.py", "from .b import f\n"), ("c.py", "import os\n"),
                        ("b.py", "from . import c\n\ndef f():\n    from .a import g\n")):
        (tmp_path / "distnet").mkdir(exist_ok=True)
        (tmp_path / "distnet" / rel).write_text(source)
    graph = import_graph(tmp_path)
    assert graph == {"distnet": {}, "distnet.a": {"distnet.b": ("distnet/a.py", 1)},
                     "distnet.b": {"distnet.c": ("distnet/b.py", 1), "distnet.a": ("distnet/b.py", 4)},
                     "distnet.c": {}}
    cycles = import_cycles(graph)
    assert cycles == [["distnet.a", "distnet.b", "distnet.a"]]
    assert describe_cycle(graph, cycles[0]) == ("distnet.a (distnet/a.py:1) -> distnet.b (distnet/b.py:4) "
                                                "-> distnet.a")
    (tmp_path / "distnet" / "b.py").write_text("from . import c\nfrom distnet import VERSION\n")   # a name of distnet
    assert import_cycles(import_graph(tmp_path)) == []
