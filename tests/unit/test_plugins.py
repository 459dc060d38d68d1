"""Plugins: classes that installed packages register through the entry-point group
``distnet.plugins`` (docs/extending.md).

Each test makes a fake installed package in a temporary folder (a ``*.dist-info`` with
``METADATA`` and ``entry_points.txt``, and the module the entry point names) and puts the folder
on ``sys.path`` (in-process) or on ``PYTHONPATH`` (the ``distnet`` command in a subprocess).
The shipped example plugin (``examples/plugin``) is installed that way too, built from YAML and
trained, on one process and on two ranks, through ``distnet distribute`` and ``distnet compare``.
"""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from distnet.comm.launcher import launch_env
from distnet.config import load_experiment_text, registry
from distnet.errors import ConfigError
from tests.tiny import CNN, experiment, write_data

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "plugin" / "distnet_example_plugin.py"
TIMEOUT = 240


def install(where, package, module, source, entry, version="1.0"):
    """A fake installed distribution ``package`` in folder ``where``: ``module.py`` holding
    ``source`` and one ``distnet.plugins`` entry point (``"name = module[:callable]"``)."""
    where.mkdir(parents=True, exist_ok=True)
    (where / f"{module}.py").write_text(textwrap.dedent(source))
    info = where / f"{package.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[distnet.plugins]\n{entry}\n")
    return where


def install_example(where):
    return install(where, "distnet-example-plugin", "distnet_example_plugin", EXAMPLE.read_text(),
                   "scaleshift = distnet_example_plugin", version="0.1.0")


def distnet(*args, path, n=1, cwd=None):
    env = launch_env(n)
    env["PYTHONPATH"] = os.pathsep.join([str(path), str(ROOT)])
    cmd = [sys.executable, "-m", "distnet", *args]
    return subprocess.run(["timeout", str(TIMEOUT), *cmd], cwd=cwd or ROOT, env=env, capture_output=True,
                          text=True)


@pytest.fixture
def plugin_path(tmp_path, monkeypatch):
    """A fresh registry (plugins not loaded yet) and an empty folder on ``sys.path``; both undone
    afterwards, with every module imported from the folder."""
    where = tmp_path / "site"
    where.mkdir()
    classes, state = dict(registry._CLASSES), {k: (list(v) if isinstance(v, list) else
                                                    dict(v) if isinstance(v, dict) else v)
                                                for k, v in registry._PLUGINS.items()}
    registry._PLUGINS.update(loaded=False, plugins=[], source={})
    monkeypatch.syspath_prepend(str(where))
    before = set(sys.modules)
    yield where
    for name in set(sys.modules) - before:
        if str(where) in str(getattr(sys.modules[name], "__file__", "") or ""):
            del sys.modules[name]
    registry._CLASSES.clear()
    registry._CLASSES.update(classes)
    registry._PLUGINS.clear()
    registry._PLUGINS.update(state)


LAYER_YAML = """!obj:distnet.experiments.FitExperiment {
  datasets: [!obj:distnet.datasets.HDF5Dataset {path: unused.h5}],
  model: !obj:distnet.models.Convnet {num_epochs: 1, learning_rate: 0.1, layers: [
    !obj:CLASS {name: x},
    !obj:distnet.layers.Layer {nout: 2, weight_init: {type: normal}},
  ]},
}
"""


# -- in-process: the registry ------------------------------------------------------------------

def test_example_plugin_classes_are_built_from_yaml(plugin_path):
    install_example(plugin_path)
    exp = load_experiment_text(LAYER_YAML.replace("CLASS", "distnet_example_plugin.ScaleShiftLayer"))
    assert type(exp.model.layers[0]).__name__ == "ScaleShiftLayer"
    exp = load_experiment_text(LAYER_YAML.replace("CLASS", "ScaleShiftLayer"))
    assert type(exp.model.layers[0]).__name__ == "ScaleShiftLayer"
    assert registry.plugin_source("ScaleShiftLayer") == "plugin scaleshift (distnet-example-plugin 0.1.0)"
    assert registry.load_plugins() == [("scaleshift", "distnet-example-plugin 0.1.0", ["ScaleShiftLayer"], None)]
    assert "scaleshift (distnet-example-plugin 0.1.0): ScaleShiftLayer" in registry.plugin_summary()


def test_plugins_load_once_on_first_lookup(plugin_path):
    install(plugin_path, "countplug", "countplug", """
        import builtins
        from distnet.config.registry import register_classes
        builtins.countplug_imports = getattr(builtins, "countplug_imports", 0) + 1

        class CountLayer:
            def __init__(self, name=None):
                self.name = name

        register_classes(CountLayer)
        """, "count = countplug")
    import builtins
    assert "countplug" not in sys.modules            # importing distnet loaded nothing
    for _ in range(3):
        cls, kind = registry.resolve("CountLayer")
        assert (cls.__name__, kind) == ("CountLayer", "layer")
    assert builtins.countplug_imports == 1
    del builtins.countplug_imports


def test_an_entry_point_may_name_a_callable(plugin_path):
    install(plugin_path, "callplug", "callplug", """
        from distnet.config import registry

        class Doubler:
            pass

        def setup():
            registry.register("Doubler", __name__, "activation", "callplug")
        """, "calls = callplug:setup")
    cls, kind = registry.resolve("callplug.Doubler")
    assert (cls.__name__, kind) == ("Doubler", "activation")
    assert registry.plugin_source("Doubler") == "plugin calls (callplug 1.0)"


def test_a_dotted_path_that_no_plugin_registered_is_refused_without_importing_it(plugin_path):
    install_example(plugin_path)
    (plugin_path / "sneaky.py").write_text("import builtins\nbuiltins.sneaky_imported = True\n"
                                           "class Evil:\n    pass\n")
    for path in ("sneaky.Evil", "os.system", "distnet_example_plugin.ScaleShiftLayerX"):
        with pytest.raises(ConfigError, match=f"unknown class !obj:{path}"):
            load_experiment_text(LAYER_YAML.replace("CLASS", path))
    assert "sneaky" not in sys.modules
    import builtins
    assert not hasattr(builtins, "sneaky_imported")


def test_a_broken_plugin_is_one_line_naming_plugin_and_package(plugin_path):
    install(plugin_path, "brokenplug", "brokenplug", "import not_a_module_xyz\n", "broken = brokenplug",
            version="0.3")
    msg = ("plugin 'broken' (package brokenplug 0.3) cannot be loaded: ModuleNotFoundError: No module "
           "named 'not_a_module_xyz' (fix or uninstall that package)")
    for _ in range(2):                                  # the same error every time, not once
        with pytest.raises(registry.PluginError) as e:
            registry.resolve("ConvLayer")
        assert str(e.value) == msg
    assert "cannot be loaded: ModuleNotFoundError" in registry.plugin_summary()


def test_a_plugin_cannot_take_a_name_that_is_in_use(plugin_path):
    install(plugin_path, "clashplug", "clashplug", """
        from distnet.config.registry import register_classes

        class FineLayer:
            pass

        class ConvLayer:
            pass

        register_classes(FineLayer, ConvLayer)
        """, "clash = clashplug")
    install(plugin_path, "sneakplug", "sneakplug", """
        from distnet.config import registry
        registry.register("MaxPoolingLayer", __name__, "layer", "sneakplug")
        """, "sneak = sneakplug")
    with pytest.raises(registry.PluginError) as e:
        registry.check_plugins()
    assert str(e.value).startswith("plugin 'clash' (package clashplug 1.0) cannot be loaded: cannot register "
                                   "clashplug.ConvLayer: the name ConvLayer is taken by distnet.layers.ConvLayer")
    report = {name: (names, error) for name, _, names, error in registry.load_plugins()}
    assert report["clash"][0] == [] and "FineLayer" not in registry._CLASSES   # all or nothing
    assert "re-registers MaxPoolingLayer" in report["sneak"][1]
    assert registry._CLASSES["MaxPoolingLayer"][0] == "distnet.layers"         # put back


# -- the command line, in a subprocess ---------------------------------------------------------

def test_importing_distnet_loads_no_plugin(tmp_path):
    site = install(tmp_path / "site", "loudplug", "loudplug", """
        print("loudplug imported")
        from distnet.config.registry import register_classes

        class LoudLayer:
            def __init__(self, name=None):
                pass

        register_classes(LoudLayer)
        """, "loud = loudplug")
    code = ("import distnet, distnet.config, distnet.layers, distnet.models, distnet.experiments, distnet.cli.main\n"
            "print('imported distnet')\n"
            "from distnet.config import registry\n"
            "for _ in range(3):\n"
            "    print(registry.resolve('LoudLayer')[0].__name__)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:5] == ["imported distnet", "loudplug imported", "LoudLayer", "LoudLayer",
                                           "LoudLayer"]


def test_list_classes_and_info_show_plugin_classes_and_their_source(tmp_path):
    site = install_example(tmp_path / "site")
    out = distnet("check", "--list-classes", path=site)
    assert out.returncode == 0, out.stderr
    lines = [l.split() for l in out.stdout.splitlines()]
    assert ["layer", "distnet_example_plugin.ScaleShiftLayer", "plugin", "scaleshift",
            "(distnet-example-plugin", "0.1.0)"] in lines
    info = distnet("info", path=site)
    assert info.returncode == 0, info.stderr
    assert "plugins: scaleshift (distnet-example-plugin 0.1.0): ScaleShiftLayer" in info.stdout
    # the reference documents distnet's own classes only
    ref = distnet("check", "--reference", path=site)
    assert ref.returncode == 0 and "ScaleShift" not in ref.stdout


def test_broken_plugin_on_the_command_line(tmp_path):
    site = install(tmp_path / "site", "brokenplug", "brokenplug", "raise RuntimeError('oops\\nmore')\n",
                   "broken = brokenplug", version="0.3")
    exp = tmp_path / "exp.yaml"
    exp.write_text(experiment(CNN, tmp_path / "data.h5"))
    want = ("distnet: error: plugin 'broken' (package brokenplug 0.3) cannot be loaded: RuntimeError: oops "
            "(fix or uninstall that package)")
    for args in (("check", str(exp)), ("check", "--list-classes"), ("run", str(exp), "--no-run-dir")):
        proc = distnet(*args, path=site)
        assert proc.returncode == 2 and proc.stderr.strip() == want, (args, proc.stderr)
    info = distnet("info", path=site)
    assert info.returncode == 0 and "plugins: broken (brokenplug 0.3): cannot be loaded: RuntimeError: oops" \
        in info.stdout


@pytest.mark.skipif(shutil.which("timeout") is None, reason="needs coreutils timeout")
def test_example_plugin_trains_and_distributes_with_the_same_numbers(tmp_path):
    """A tiny CNN with the plugin's layer: distnet distribute keeps it (one class: it distributes
    itself), and distnet compare runs it on one process and on 2 ranks: the same costs and
    error rates."""
    site = install_example(tmp_path / "site")
    data = write_data(tmp_path / "data.h5")
    text = experiment(CNN, data).replace(
        "      !obj:distnet.layers.MaxPoolingLayer {name: pool",
        "      !obj:ScaleShiftLayer {name: ss, weight_init: {type: uniform, low: 0.5, high: 1.5}},\n"
        "      !obj:distnet.layers.MaxPoolingLayer {name: pool", 1)
    assert "ScaleShiftLayer" in text
    exp, dist = tmp_path / "exp.yaml", tmp_path / "exp_dist.yaml"
    exp.write_text(text)
    proc = distnet("distribute", str(exp), "-o", str(dist), path=site)
    assert proc.returncode == 0, proc.stderr
    assert "!obj:ScaleShiftLayer {name: ss" in dist.read_text() and "dist_flag: True" in dist.read_text()
    proc = distnet("compare", str(exp), str(dist), "-n", "2", "--cost-tol", "1e-9", "--rate-tol", "0",
                   path=site, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "AGREE" in proc.stdout
