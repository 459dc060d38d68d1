"""No code execution from experiment files (or anything else distnet reads): YAML's python tags
are refused before anything runs, only registry classes are built, and the package itself never
calls eval/exec or an unrestricted unpickler/YAML loader."""
import ast
from pathlib import Path

import pytest

from distnet.config import load_experiment, load_experiment_text
from distnet.errors import ConfigError

PACKAGE = Path(__file__).resolve().parents[2] / "distnet"

PAYLOADS = [
    "!!python/object/apply:os.system ['touch {marker}']",
    "!obj:distnet.experiments.FitExperiment {{model: !!python/object/apply:os.system ['touch {marker}']}}",
    "!obj:distnet.experiments.FitExperiment {{model: !!python/object/new:subprocess.Popen [['touch', '{marker}']]}}",
    "!obj:distnet.experiments.FitExperiment {{model: !!python/name:os.system }}",
    "!obj:distnet.experiments.FitExperiment {{model: !!python/module:os }}",
    "x: !!python/object:os.PathLike {{}}",
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_python_tags_are_refused_and_nothing_runs(tmp_path, payload):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.yaml"
    path.write_text(payload.format(marker=marker))
    with pytest.raises(ConfigError, match=r"evil.yaml:1: .*python/"):
        load_experiment(str(path))
    assert not marker.exists()


def test_obj_tags_name_only_registry_classes(tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(ConfigError, match="unknown class !obj:os.system"):
        load_experiment_text(f"!obj:os.system {{command: 'touch {marker}'}}")
    assert not marker.exists()


def _calls(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name):
                yield f.id, node
            elif isinstance(f, ast.Attribute):
                base = f.value.id if isinstance(f.value, ast.Name) else "?"
                yield f"{base}.{f.attr}", node


FORBIDDEN = {"eval", "exec", "compile", "pickle.load", "pickle.loads", "marshal.loads", "yaml.unsafe_load",
             "yaml.full_load"}


def test_the_package_never_evaluates_or_unpickles_freely():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for name, node in _calls(tree):
            if name in FORBIDDEN:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {name}()")
            if any(kw.arg == "allow_pickle" and ast.unparse(kw.value) != "False" for kw in node.keywords):
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {name}(allow_pickle=...)")
            if name == "yaml.load":
                loader = {kw.arg: ast.unparse(kw.value) for kw in node.keywords}.get("Loader", "")
                if loader in ("", "yaml.Loader", "yaml.UnsafeLoader", "yaml.FullLoader"):
                    bad.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: yaml.load(Loader={loader})")
    assert not bad, "\n".join(bad)
