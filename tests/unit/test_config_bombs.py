"""Hostile experiment files and values: alias bombs, deep nesting, non-UTF-8 bytes, recursive
aliases, a layer reused through an alias, and sizes / rates / ranges out of bounds. Each ends as
one located ConfigError (file:line, key) at build time, i.e. in ``distnet check`` and before
training; the bombs also through the CLI (``check``, ``show``, ``run``, ``--set``) under a
``timeout``, so that a regression fails instead of hanging the suite."""
import subprocess
import sys
from pathlib import Path

import pytest

from distnet.config import load_experiment, load_experiment_text
from distnet.config.builder import MAX_VALUES
from distnet.config.types import SIZE_CAP
from distnet.config.yaml_loader import MAX_DEPTH
from distnet.errors import ConfigError
from tests.tiny import CNN, experiment, write_data

ROOT = Path(__file__).resolve().parents[2]
MOMENTUM = "momentum: {type: nesterov, coef: 0.5}"


def alias_bomb(levels=9, width=9):
    """``a0: &a0 [1 x width], a1: &a1 [*a0 x width], ...``: width**levels values, ~2 KB of text."""
    items = [f"a0: &a0 [{', '.join(['1'] * width)}]"]
    items += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return ", ".join(items)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bombs")
    data = write_data(d / "data.h5")
    base = experiment(CNN, data)
    (d / "base.yaml").write_text(base)
    (d / "bomb.yaml").write_text(base.replace(MOMENTUM, "momentum: {type: nesterov, coef: 0.5, "
                                              + alias_bomb() + "}"))
    (d / "latin1.yaml").write_bytes(base.replace("name: conv", "name: conv\xe9").encode("latin-1"))
    return d


@pytest.fixture(scope="module")
def base_text(files):
    return (files / "base.yaml").read_text()


def error(text, name="exp.yaml"):
    with pytest.raises(ConfigError) as e:
        exp = load_experiment_text(text, name)
        exp.check()
    return e.value


def distnet(*args, cwd=None):
    return subprocess.run(["timeout", "-k", "5", "120", sys.executable, "-m", "distnet", *args],
                          cwd=cwd or ROOT, capture_output=True, text=True)


def one_clear_line(proc, *parts):
    """A clean failure: non-zero exit (not the timeout's 124), no traceback, and a last line
    that contains ``parts``."""
    assert proc.returncode not in (0, 124, 137), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("distnet: error: ") and all(p in last for p in parts), last
    return last


# -- alias bombs -----------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["check", "show", "run"])
def test_alias_bomb_ends_with_a_located_error(files, command):
    extra = ["--no-run-dir", "--no-checkpoint"] if command == "run" else []
    one_clear_line(distnet(command, str(files / "bomb.yaml"), *extra),
                   "bomb.yaml:6: key 'momentum': ", f"more than {MAX_VALUES} values", "alias")


def test_alias_bomb_through_set(files):
    proc = distnet("run", str(files / "base.yaml"), "--no-run-dir", "--set",
                   "model.momentum={" + alias_bomb() + "}")
    one_clear_line(proc, "command line --set model.momentum=", f"more than {MAX_VALUES} values")


@pytest.mark.parametrize("where", ["weight_init", "logging", "seterr", "name", "list"])
def test_alias_bombs_under_any_key(base_text, where):
    bomb = alias_bomb()
    text = {
        "weight_init": base_text.replace("low: -0.3, high: 0.3}", "low: -0.3, high: 0.3, " + bomb + "}"),
        "logging": base_text.replace("  model: !obj", "  logging: {" + bomb + "},\n  model: !obj"),
        "seterr": base_text.replace("{rng_seed: 5}", "{rng_seed: 5, seterr_handling: {" + bomb + "}}"),
        "name": base_text.replace("name: conv,", "name: {" + bomb + "},"),
        "list": base_text.replace(MOMENTUM, MOMENTUM + ", stages: ["
                                  + ", ".join(item.split(": ", 1)[1] for item in bomb.split(", a")) + "]"),
    }[where]
    e = error(text)
    assert "alias" in str(e) and e.where.startswith("exp.yaml:")
    assert e.key == {"weight_init": "weight_init", "logging": "logging", "seterr": "seterr_handling",
                     "name": "name", "list": "stages"}[where]


def test_merge_key_bomb_is_flattened_once(base_text):
    """``<<: [*m, *m, ...]`` nested 12 deep: merges keep one pair per key as they flatten."""
    merges = ["m0: &m0 {x: 1, y: 2}"] + [f"m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 9)}]}}"
                                         for i in range(1, 12)]
    e = error(base_text.replace(MOMENTUM, "momentum: {type: nesterov, " + ", ".join(merges) + "}"))
    assert e.key == "momentum" and "unknown momentum key" in str(e)


def test_long_strings_count_towards_the_cap(base_text):
    strings = ["s0: &s0 '" + "x" * 200_000 + "'"] + [f"s{i}: &s{i} [{', '.join([f'*s{i - 1}'] * 9)}]"
                                                     for i in range(1, 6)]
    e = error(base_text.replace("name: conv,", "name: {" + ", ".join(strings) + "},"))
    assert f"more than {MAX_VALUES} values" in str(e)


def test_a_shared_mapping_is_built_once_and_allowed(base_text):
    text = base_text.replace("weight_init: {type: normal, scale: 0.1},", "weight_init: &w {type: normal, scale: 0.1},", 1)
    text = text.replace("weight_init: {type: normal, scale: 0.1},", "weight_init: *w,")
    exp = load_experiment_text(text, "exp.yaml")
    assert exp.model.layers[2].weight_init == exp.model.layers[3].weight_init == {"type": "normal", "scale": 0.1}


def test_recursive_aliases(base_text):
    e = error(base_text.replace(MOMENTUM, "momentum: &r {type: nesterov, coef: 0.5, self: [*r]}"))
    assert e.where == "exp.yaml:6" and "recursive" in str(e)
    e = error(base_text.replace("!obj:distnet.layers.MaxPoolingLayer {name: pool, fshape: 2}",
                                "&p !obj:distnet.layers.MaxPoolingLayer {name: pool, fshape: 2, stage: *p}"))
    assert "exp.yaml:" in str(e) and "recursive" in str(e)


# -- malformed files -----------------------------------------------------------------------

def test_non_utf8_file_names_the_line(files):
    with pytest.raises(ConfigError, match=r"latin1.yaml:8: not a UTF-8 text file \(byte 0xe9"):
        load_experiment(files / "latin1.yaml")
    one_clear_line(distnet("check", str(files / "latin1.yaml")), "latin1.yaml:8", "UTF-8")


@pytest.mark.parametrize("nest", ["flow_list", "flow_map", "block", "set"])
def test_deep_nesting(base_text, tmp_path, nest):
    if nest == "block":
        text = "\n".join("  " * i + f"k{i}:" for i in range(3000)) + " 1\n"
    elif nest == "flow_map":
        text = base_text.replace(MOMENTUM, MOMENTUM + ", x: " + "{a: " * 3000 + "1" + "}" * 3000)
    else:
        text = base_text.replace(MOMENTUM, MOMENTUM + ", x: " + "[" * 5000 + "]" * 5000)
    if nest == "set":
        path = tmp_path / "exp.yaml"
        path.write_text(base_text)
        with pytest.raises(ConfigError, match=f"command line.*nested more than {MAX_DEPTH} levels"):
            load_experiment(path, ["model.momentum=" + "[" * 5000 + "]" * 5000])
        return
    e = error(text)
    assert f"nested more than {MAX_DEPTH} levels" in str(e) and e.where.startswith("exp.yaml:")


def test_control_characters_and_huge_integers(base_text):
    e = error(base_text.replace("name: conv", "name: co\x00nv"))
    assert e.where == "exp.yaml:8" and "#x0000" in str(e) and "\n" not in str(e)
    e = error(base_text.replace("nofm: 3", "nofm: " + "9" * 5000))
    assert e.where == "exp.yaml:8" and "malformed YAML" in str(e)


# -- a layer used twice ----------------------------------------------------------------------

def test_a_layer_reused_through_an_alias_is_refused(base_text):
    text = base_text.replace("!obj:distnet.layers.LayerWithNoBias {name: hidden, nout: 5,",
                             "&h !obj:distnet.layers.LayerWithNoBias {name: hidden, nout: 10,")
    text = text.replace("      !obj:distnet.layers.Layer {name: out", "      *h,\n      !obj:distnet.layers.Layer {name: out")
    e = error(text)
    assert (e.where, e.key) == ("exp.yaml:7", "layers")
    assert "item 3 is the same object as item 2" in str(e) and "write the layer twice" in str(e)


def test_a_dataset_listed_twice_is_refused(base_text):
    text = base_text.replace("datasets: [!obj:distnet.datasets.HDF5Dataset {path: ", "datasets: [&d !obj:distnet.datasets.HDF5Dataset {path: ")
    text = text.replace("}],\n  model:", "}, *d],\n  model:")
    e = error(text)
    assert e.key == "datasets" and "item 1 is the same object as item 0" in str(e)


# -- sizes, rates and ranges -----------------------------------------------------------------

BAD_VALUES = [
    # (old text, new text, key, line, words in the message)
    ("batch_size: 8", "batch_size: 0", "batch_size", 5, "expected int >= 1, got 0"),
    ("batch_size: 8", "batch_size: -5", "batch_size", 5, "expected int >= 1, got -5"),
    ("nofm: 3", "nofm: 0", "nofm", 8, "expected int >= 1"),
    ("nout: 5", "nout: 0", "nout", 11, "expected int >= 1"),
    ("learning_rate: 0.1", "learning_rate: -0.1", "learning_rate", 5, "expected number >= 0"),
    ("learning_rate: 0.1", "learning_rate: .nan", "learning_rate", 5, "must be finite"),
    ("learning_rate: 0.1", "learning_rate: .inf", "learning_rate", 5, "must be finite"),
    ("num_epochs: 4", "num_epochs: -1", "num_epochs", 5, "expected int >= 0"),
    ("low: -0.3, high: 0.3", "low: 0.3, high: -0.3", "weight_init", 9, "low (0.3) is larger than high (-0.3)"),
    ("low: -0.3", "low: .nan", "weight_init", 9, "low: expected a number, got nan"),
    ("high: 0.3", "high: .inf", "weight_init", 9, "high: expected a number, got inf"),
    ("scale: 0.1}", "scale: -1}", "weight_init", 11, "scale: expected number >= 0"),
    ("scale: 0.1}", "scale: 0.1, bias_init: .nan}", "weight_init", 11, "bias_init"),
    ("coef: 0.5", "coef: .nan", "momentum", 6, "coef: expected a number"),
    ("coef: 0.5", "coef: -0.5", "momentum", 6, "coef: expected number in [0, 1)"),
    ("coef: 0.5", "coef: 1.5", "momentum", 6, "coef: expected number in [0, 1)"),
    ("fshape: 3", "fshape: 0", "fshape", 8, "expected sizes >= 1"),
    ("fshape: 2}", "fshape: 2, stride: 0}", "stride", 10, "expected sizes >= 1"),
    ("padding: 1", "padding: -1", "padding", 8, "expected sizes >= 0"),
    ("padding: 1", "padding: [1, -2]", "padding", 8, "expected sizes >= 0"),
    ("nofm: 3", "nofm: 100000000000000000000", "nofm", 8, f"more than {SIZE_CAP}"),
    ("rng_seed: 5", "rng_seed: -1", "rng_seed", 2, "expected int in [0, 4294967295]"),
    ("name: out, nout: 3,", "name: out, nout: 3, learning_rate: -1,", "learning_rate", 13, ">= 0"),
    ("  model: !obj", "  data: 0,\n  model: !obj", "data", 4, "expected int >= 1"),
    ("  model: !obj", "  grid: [0, 1],\n  model: !obj", "grid", 4, "expected sizes >= 1"),
    ("  model: !obj", "  eval_every: -1,\n  model: !obj", "eval_every", 4, "expected int >= 0"),
    ("{path: ", "{sample_pct: .nan, path: ", "sample_pct", 3, "must be finite"),
    ("batch_size: 8", "batch_size: 8, micro_batches: 0", "micro_batches", 5, "expected int >= 1"),
    ("nofm: 3", "nofm: 3.5", "nofm", 8, "expected an integer"),
    ("nofm: 3", "nofm: true", "nofm", 8, "expected an integer"),
    ("learning_rate: 0.1", "learning_rate: fast", "learning_rate", 5, "expected a number"),
]


@pytest.mark.parametrize("old,new,key,line,words", BAD_VALUES, ids=[b[1] for b in BAD_VALUES])
def test_sizes_rates_and_ranges_are_checked_at_build_time(base_text, old, new, key, line, words):
    assert old in base_text
    e = error(base_text.replace(old, new, 1))
    assert (e.where, e.key) == (f"exp.yaml:{line}", key) and words in str(e), str(e)


def test_gb_and_local_layer_rates(tmp_path):
    from tests.tiny import GB
    text = experiment(GB, write_data(tmp_path / "d.h5"))
    for old, new, key in [("num_pretrain_epochs: 1", "num_pretrain_epochs: -1", "num_pretrain_epochs"),
                          ("sparsity: 0.1", "sparsity: .nan", "sparsity"),
                          ("pretrain_learning_rate: 0.01", "pretrain_learning_rate: -0.01", "pretrain_learning_rate")]:
        assert old in text
        assert error(text.replace(old, new)).key == key


def test_zero_epochs_is_allowed(base_text):
    """``num_epochs: 0`` trains nothing and evaluates the initial (or resumed) model."""
    exp = load_experiment_text(base_text.replace("num_epochs: 4", "num_epochs: 0"), "exp.yaml")
    assert exp.model.num_epochs == 0


def test_overrides_are_checked_like_the_file(files):
    with pytest.raises(ConfigError, match=r"command line --set model.batch_size=0: key 'batch_size': expected int >= 1"):
        load_experiment(files / "base.yaml", ["model.batch_size=0"])
    with pytest.raises(ConfigError, match="command line --set model.layers.0.nofm=0: key 'nofm'"):
        load_experiment(files / "base.yaml", ["model.layers.0.nofm=0"])


def test_run_options_set_keys_after_the_overrides(files):
    """What ``distnet run``'s options set is applied after --set, as given (no YAML reading of
    the value: a path with braces stays a string), creating the mappings the file lacks
    (keeping the keys of those it has), and a bad value is told as the option's."""
    settings = [("--checkpoint ck_{epoch}.h5", "checkpoint.path", "ck_{epoch}.h5"),
                ("--checkpoint-every 2", "checkpoint.every", 2), ("-q", "logging.level", "WARNING")]
    exp = load_experiment(files / "base.yaml", ["checkpoint={every: 5, at_end: false}", "logging={format: '%(message)s'}"],
                          settings=settings)
    assert (exp.checkpoint_path, exp.checkpoint_every, exp.checkpoint_at_end) == ("ck_{epoch}.h5", 2, False)
    assert exp.logging == {"level": 30, "format": "%(message)s"}
    exp = load_experiment(files / "base.yaml", settings=[("--tensorboard", "tensorboard", True)])
    assert exp.tensorboard is True and exp.checkpoint_enabled and exp.watchdog is None
    with pytest.raises(ConfigError, match=r"command line --watchdog -1: key 'watchdog': expected number > 0"):
        load_experiment(files / "base.yaml", settings=[("--watchdog -1", "watchdog", -1.0)])


def test_an_object_in_set_says_that_set_takes_plain_values(files):
    """``--set model.cost=!obj:...`` was "could not determine a constructor for the tag"."""
    with pytest.raises(ConfigError, match=r"--set takes plain YAML values.*!obj:.*edit the file") as e:
        load_experiment(files / "base.yaml", ["model.cost=!obj:distnet.costs.SumSquaredDiffs {}"])
    assert "constructor" not in str(e.value)


def test_check_refuses_bad_sizes_through_the_cli(files, base_text, tmp_path):
    path = tmp_path / "nofm0.yaml"
    path.write_text(base_text.replace("nofm: 3", "nofm: 0"))
    one_clear_line(distnet("check", str(path)), "nofm0.yaml:8", "key 'nofm'", "expected int >= 1")


# -- the logging mapping ---------------------------------------------------------------------

BAD_LOGGING = [
    # (the logging mapping, words in the message): each was ignored silently or a traceback
    ("{levl: DEBUG}", "unknown logging key(s) ['levl']; valid: ['filename', 'format', 'level', 'log_dir']"),
    ("{level: bogus}", "logging level must be"),
    ("{level: [10]}", "logging level must be"),
    ("{format: 5}", "logging format must be a string"),
    ("{format: '{message}'}", "logging format '{message}'"),
    ("{format: '%(foo)s'}", "logging format '%(foo)s'"),
    ("{filename: 5}", "logging filename must be a file name, got 5"),
    ("{log_dir: ''}", "logging log_dir must be a folder name, got ''"),
]


@pytest.mark.parametrize("mapping, words", BAD_LOGGING, ids=[b[0] for b in BAD_LOGGING])
def test_the_logging_mapping_is_checked_at_build_time(base_text, mapping, words):
    e = error(base_text.replace("  model: !obj", f"  logging: {mapping},\n  model: !obj"))
    assert (e.where, e.key) == ("exp.yaml:4", "logging") and words in str(e), str(e)


@pytest.mark.parametrize("mapping, want", [
    ("{level: 20, format: '%(asctime)-15s %(levelname)s:%(module)s - %(message)s'}",
     {"level": 20, "format": "%(asctime)-15s %(levelname)s:%(module)s - %(message)s"}),
    ("{level: DEBUG}", {"level": 10}),          # a level name is the logging module's number
    ("{level: warning}", {"level": 30}),        # in any case
    ("{filename: run.log}", {"filename": "run.log"}),
])
def test_good_logging_mappings(base_text, mapping, want):
    exp = load_experiment_text(base_text.replace("  model: !obj", f"  logging: {mapping},\n  model: !obj"))
    assert exp.logging == want


def test_an_unwritable_log_file_is_one_clear_line(files, tmp_path):
    proc = distnet("run", str(files / "base.yaml"), "--no-run-dir", "--no-checkpoint", "--set",
                   f"logging={{filename: {tmp_path}/no/such/dir/log.txt}}")
    one_clear_line(proc, "command line --set logging=", "key 'logging'", "cannot open the log file",
                   "no/such/dir/log.txt: No such file or directory")


@pytest.mark.parametrize("mapping, words", [
    ("{foo: raise}", "unknown seterr_handling key(s) ['foo']"),
    ("{all: explode}", "seterr_handling all must be one of"),
    ("[raise]", "expected a dict"),
])
def test_seterr_handling_is_checked(base_text, mapping, words):
    e = error(base_text.replace("{rng_seed: 5}", "{rng_seed: 5, seterr_handling: " + mapping + "}"))
    assert (e.where, e.key) == ("exp.yaml:2", "seterr_handling") and words in str(e), str(e)


def test_a_floating_point_error_asked_for_by_seterr_is_one_clear_line(files):
    """``seterr_handling: {all: raise}`` (neon's) stops the run on an overflow: one line, no
    traceback."""
    proc = distnet("run", str(files / "base.yaml"), "--no-run-dir", "--no-checkpoint",
                   "--set", "backend.seterr_handling={all: raise}", "--set", "model.learning_rate=1e300")
    one_clear_line(proc, "floating-point error", "seterr_handling")


CONV_INIT = "{type: uniform, low: -0.3, high: 0.3}"


@pytest.mark.parametrize("old, init, dtype, line", [
    (CONV_INIT, "{type: uniform, low: -1e308, high: 1e308}", "Numpy64", 9),   # numpy: OverflowError traceback
    (CONV_INIT, "{type: uniform, low: -1e39, high: 1e39}", "Numpy", 9),   # inf in float32: NaN outputs, silently
    (CONV_INIT, "{type: normal, scale: 1e39}", "Numpy", 9),
    ("out, nout: 3, weight_init: {type: normal, scale: 0.1}", "out, nout: 3, weight_init: {type: normal, "
     "scale: 0.1, bias_init: 1e39}", "Numpy", 13),
])
def test_weights_the_dtype_cannot_hold_are_a_located_error(base_text, old, init, dtype, line):
    """``num_epochs: 0`` evaluated a model of inf weights (NaN outputs) and printed error rates."""
    assert old in base_text
    text = base_text.replace(old, init, 1).replace("Numpy64 {", f"{dtype} {{").replace("num_epochs: 4", "num_epochs: 0")
    exp = load_experiment_text(text, "exp.yaml")
    with pytest.raises(ConfigError) as e:
        exp.run()
    assert (e.value.key, e.value.where) == ("weight_init", f"exp.yaml:{line}") and "cannot" in str(e.value), str(e.value)
