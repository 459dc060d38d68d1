"""Everyday tools without MPI: the resolved experiment (YAML dump of the parse tree), run
directories, ``distnet show``'s geometry, the PNG plot, the progress bar, fault-injection specs."""
import errno
import io
import json
import logging
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from distnet.comm import Topology
from distnet.config import load_experiment, parse_file, parse_yaml
from distnet.config.builder import Builder
from distnet.errors import ConfigError, DistnetError, TopologyError
from distnet.config.resolved import dump_tree
from distnet.experiments.rundir import RunDir, RunDirError, default_run_dir, read_run
from distnet.faults import InjectedFault, fault_hook, parse_fault
from distnet.log import get_logger
from distnet.progress import ProgressBar

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = [ROOT / "experiments" / name for name in
               ("mnist_cnn.yaml", "mnist_cnn_dist.yaml", "mnist_gb_dist.yaml", "cifar10_gb.yaml")]


# -- resolved experiments ----------------------------------------------------------------------

@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_dumped_tree_builds_the_same_experiment(path):
    tree = parse_file(str(path))
    again = parse_yaml(dump_tree(tree), "dumped.yaml")
    a, b = Builder().build(tree), Builder().build(again)
    assert type(a.model) is type(b.model) and a.model.num_epochs == b.model.num_epochs
    assert [type(x) for x in a.model.layers] == [type(x) for x in b.model.layers]
    assert [x.__dict__.get("weight_init") for x in a.model.layers] == \
        [x.__dict__.get("weight_init") for x in b.model.layers]
    assert a.dist_flag == b.dist_flag and a.backend.rng_seed == b.backend.rng_seed


def test_aliased_objects_stay_one_object():
    text = """!obj:distnet.experiments.FitExperiment {
      backend: &be !obj:distnet.backends.Numpy64 {rng_seed: 3},
      datasets: [!obj:distnet.datasets.MNIST {repo_path: ., backend: *be}],
      model: !obj:distnet.models.MLP {num_epochs: 1, learning_rate: 0.1,
        layers: [!obj:distnet.layers.Layer {nout: 10, weight_init: {type: normal}}]}}"""
    dumped = dump_tree(parse_yaml(text))
    assert "&" in dumped and "*" in dumped
    exp = Builder().build(parse_yaml(dumped))
    assert exp.dataset.backend is exp.backend


# -- run directories ---------------------------------------------------------------------------

def test_default_run_dir_names(tmp_path, monkeypatch):
    import datetime
    now = datetime.datetime(2025, 1, 2, 3, 4, 5)
    assert default_run_dir("x/mnist_cnn.yaml", base="runs", now=now) == "runs/mnist_cnn-20250102-030405"
    monkeypatch.setenv("DISTNET_RUNS_DIR", str(tmp_path))
    assert default_run_dir("a.yaml", now=now) == str(tmp_path / "a-20250102-030405")
    first, second = RunDir.create(None, "a.yaml"), RunDir.create(None, "a.yaml")
    assert first.path != second.path and Path(first.path).is_dir() and Path(second.path).is_dir()


def test_a_run_directory_holding_a_run_is_refused(tmp_path):
    rd = RunDir.create(str(tmp_path / "r"))
    rd.start({"yaml": "x", "resolved": "y", "overrides": [], "source": "e.yaml"}, command=["distnet"])
    before = (tmp_path / "r" / "run.json").read_text()
    with pytest.raises(RunDirError, match="already holds a run"):
        RunDir.create(str(tmp_path / "r"))
    assert (tmp_path / "r" / "run.json").read_text() == before


def test_read_run_from_dir_and_metrics_file(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "metrics.jsonl").write_text('{"epoch": 0, "cost": 2.0}\n{"epoch": 1, "cost": 1.0, "test_misclass": 50}\n'
                                     '{"final": true, "test_misclass": 40.0}\n')
    (d / "run.json").write_text(json.dumps({"topology": {"size": 4, "grid": [2, 2], "data": 1}}))
    run = read_run(str(d))
    assert run["label"] == "run (4 ranks, grid 2x2)" and [r["cost"] for r in run["epochs"]] == [2.0, 1.0]
    assert run["final"]["test_misclass"] == 40.0
    assert read_run(str(d / "metrics.jsonl"))["label"] == "metrics.jsonl"
    (d / "metrics.jsonl").write_text("{oops\n")
    with pytest.raises(DistnetError, match=r"metrics.jsonl:1: not a JSON line"):
        read_run(str(d))
    with pytest.raises(DistnetError, match="no such run directory"):
        read_run(str(tmp_path / "nothing"))


# -- distnet show ------------------------------------------------------------------------------

def test_show_mnist_cnn_on_4_ranks():
    from distnet.experiments.report import format_show, layer_rows
    exp = load_experiment(str(ROOT / "experiments/mnist_cnn_dist.yaml"))
    text = format_show(exp, "mnist_cnn_dist.yaml", 4)
    assert "4 rank(s) = data 1 x pipe 1 x grid 2x2" in text
    rows = {r.name: r for r in layer_rows(exp, (2, 2), 50)}
    assert rows["conv1"].global_shape == (20, 24, 24) and rows["conv1"].rank0_shape == (20, 12, 12)
    assert rows["conv1"].chunk_shape == (1, 16, 16) and rows["conv1"].halo == (2, 2, 2, 2)
    assert rows["pool1"].halo == (0, 0, 0, 0)
    assert (rows["fc1"].params_global, rows["fc1"].params_rank, rows["fc1"].sharded) == (400000, 100000, True)
    assert rows["conv2"].params_rank == 25000 and rows["output"].params_rank == 5000
    # uneven tiles: rank 0 holds the largest one (block sizes differ by at most one)
    rows3 = {r.name: r for r in layer_rows(exp, (1, 3), 1)}
    assert rows3["conv1"].rank0_shape == (20, 24, 8) and rows3["pool2"].rank0_shape == (50, 4, 2)


@pytest.mark.parametrize("name", ["mnist_cnn.yaml", "mnist_gb.yaml"])
def test_show_parameter_counts_equal_the_built_model(name):
    from distnet.experiments.report import layer_rows
    exp = load_experiment(str(ROOT / "experiments" / name))
    exp.model.infer_shapes(exp.dataset.image_shape)
    rows = layer_rows(exp, (1, 1), 1)
    exp.model.configure(exp.backend, Topology.serial())
    exp.model.init_params()
    for row, layer in zip(rows, exp.model.layers):
        assert row.params_global == sum(int(np.prod(p.value.shape)) for p in layer.params()), layer.name


def test_show_counts_the_parameters_of_a_stage_per_rank():
    """With pipeline stages a rank holds its stage's layers only: the per-rank parameter count
    is the largest stage's, from the layers the built model places on each stage."""
    from distnet.experiments.report import format_show
    exp = load_experiment(str(ROOT / "experiments/mnist_mlp_pipeline.yaml"))   # stages 0, 1, 0
    text = format_show(exp, "x", 2)
    assert "data 1 x pipe 2 x grid 1x1" in text and "stage" in text.splitlines()[1]
    exp.model.configure(exp.backend, Topology.serial())
    exp.model.init_params()
    per_stage = [0, 0]
    for layer, stage in zip(exp.model.layers, exp.model.stage_plan(2)):
        per_stage[stage] += sum(int(np.prod(p.value.shape)) for p in layer.params())
    assert per_stage[0] != per_stage[1]
    assert f"at most {max(per_stage):,} on one rank, its stage's layers only" in text


def test_show_datapar_makes_every_rank_a_replica():
    from distnet.experiments.report import format_show
    exp = load_experiment(str(ROOT / "experiments/mnist_mlp_datapar.yaml"))
    assert "4 rank(s) = data 4 x pipe 1 x grid 1x1" in format_show(exp, "x", 4)
    assert "batch 50 (13 rows per replica)" in format_show(exp, "x", 4)


def test_show_refuses_sizes_that_cannot_work():
    from distnet.experiments.report import format_show
    dist = load_experiment(str(ROOT / "experiments/mnist_cnn_dist.yaml"))
    with pytest.raises(TopologyError, match="Rank counts that work: 1, 2, 3, 4, 6"):
        format_show(dist, "x", 7)
    single = load_experiment(str(ROOT / "experiments/mnist_cnn.yaml"))
    with pytest.raises(TopologyError, match="dist_flag: False"):
        format_show(single, "x", 2)
    grid = load_experiment(str(ROOT / "experiments/mnist_cnn_dist.yaml"), ["grid=[1, 3]"])
    with pytest.raises(TopologyError, match="grid 1x3 needs 3 ranks, but the run has 4"):
        format_show(grid, "x", 4)
    # a rank count that the grid divides: the data replicas that would use it are named
    square = load_experiment(str(ROOT / "experiments/mnist_cnn_dist.yaml"), ["grid=[2, 2]"])
    with pytest.raises(TopologyError, match=r"grid 2x2 needs 4 ranks, but the run has 8\. .*or keep grid 2x2 "
                                            r"with data: 2 \(2 replicas x 4 = 8 ranks\)"):
        format_show(square, "x", 8)


@pytest.mark.parametrize("args, words", [
    (["--flops", "0"], "--flops"),                 # was: ZeroDivisionError
    (["--beta", "0"], "--beta"),                   # was: ZeroDivisionError
    (["--mem-rate", "-1"], "--mem-rate"),          # was: a negative step time
    (["--alpha", "-1"], "--alpha"),
    (["--beta", "nan"], "--beta"),
    (["--alpha", "inf"], "--alpha"),
    (["--input-shape", "0,28,28"], "--input-shape"),
    (["--input-shape", "1,-28,28"], "--input-shape"),
])
def test_show_refuses_meaningless_cost_model_constants_and_shapes(args, words):
    from click.testing import CliRunner
    from distnet.cli.main import main
    r = CliRunner().invoke(main, ["show", str(ROOT / "experiments/mnist_cnn_dist.yaml"), "-n", "2", *args])
    assert r.exit_code == 2 and words in r.output and "predicted step" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_show_refuses_a_grid_for_an_experiment_that_has_none():
    """``--grid 0x2`` (or any grid) on a non-distributed experiment was accepted and ignored."""
    from click.testing import CliRunner
    from distnet.cli.main import main
    r = CliRunner().invoke(main, ["show", str(ROOT / "experiments/mnist_cnn.yaml"), "--grid", "0x2"])
    assert r.exit_code == 2 and "--grid" in r.output and "dist_flag" in r.output, r.output


# -- distnet plot ------------------------------------------------------------------------------

def _run_dir(path, costs, final):
    path.mkdir()
    lines = [json.dumps({"epoch": e, "cost": c, "test_misclass": 10.0 * c}) for e, c in enumerate(costs)]
    lines.append(json.dumps({"final": True, **final}))
    (path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return str(path)


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    from distnet.cli.plot import plot_runs
    a = _run_dir(tmp_path / "a", [2.0, 1.5, 1.2], {"train_misclass": 5.0, "test_misclass": 7.0})
    b = _run_dir(tmp_path / "b", [2.0, 1.5, 1.2], {"train_misclass": 5.0, "test_misclass": 7.0})
    out = plot_runs([a, b], str(tmp_path / "out.png"), title="a vs b")
    data = Path(out).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000


def test_plot_replaces_only_an_earlier_png_and_never_its_inputs(tmp_path):
    """-o naming a run's metrics.jsonl (or a dataset) wrote the PNG over it; plotting that run
    again was then a UnicodeDecodeError traceback."""
    pytest.importorskip("matplotlib")
    from distnet.cli.plot import plot_runs
    a = _run_dir(tmp_path / "a", [2.0, 1.5], {"test_misclass": 7.0})
    metrics = Path(a) / "metrics.jsonl"
    before = metrics.read_bytes()
    for out in (metrics, tmp_path / "a.yaml"):
        out.write_bytes(before) if out != metrics else None
        with pytest.raises(DistnetError, match=rf"cannot write {out}: it (is an input|exists and is no PNG)"):
            plot_runs([a], str(out), inputs=[str(tmp_path / "a.yaml")])
    assert metrics.read_bytes() == before
    out = str(tmp_path / "p.png")
    plot_runs([a], out)
    plot_runs([a], out)                 # an earlier plot is replaced
    metrics.write_bytes(b"\x89PNG\r\n\x1a\n....")
    with pytest.raises(DistnetError, match=r"metrics.jsonl: not a metrics file \(not UTF-8 text\)"):
        plot_runs([a], out)
    metrics.write_text("[1, 2]\n")
    with pytest.raises(DistnetError, match=r"metrics.jsonl:1: not a metrics record"):
        plot_runs([a], out)


def test_a_damaged_run_json_does_not_stop_a_plot(tmp_path):
    """A run.json cut short or overwritten was a JSONDecodeError / UnicodeDecodeError traceback."""
    from distnet.experiments.rundir import read_run
    a = _run_dir(tmp_path / "a", [2.0, 1.5], {"test_misclass": 7.0})
    for junk in (b"{not json", b"\x9b\x00\xff", b"[1]"):
        (Path(a) / "run.json").write_bytes(junk)
        run = read_run(a)
        assert run["info"] == {} and [r["cost"] for r in run["epochs"]] == [2.0, 1.5]


@pytest.mark.parametrize("topology", [{"size": 2}, {"size": 2, "grid": 5}, {"size": "x", "grid": [1, 2]},
                                      [1, 2], {"size": 2, "grid": [1, 2], "data": None}])
def test_a_run_json_of_another_version_labels_the_run_by_its_name(tmp_path, topology):
    """A topology this distnet does not write (another version, an edited file) was a KeyError or
    TypeError traceback in distnet plot and distnet runs."""
    from distnet.cli.runs import describe
    from distnet.experiments.rundir import read_run
    a = _run_dir(tmp_path / "a", [2.0, 1.5], {"test_misclass": 7.0})
    (Path(a) / "run.json").write_text(json.dumps({"status": "finished", "topology": topology}))
    assert read_run(a)["label"] == "a"
    assert describe(a).split()[:3] == [a, "finished", "?"] and "x ranks" not in describe(a)


def test_plot_of_a_run_that_recorded_no_epoch_says_so(tmp_path, capsys):
    """A run that failed before its first epoch ended (empty metrics.jsonl) was drawn as an empty
    curve without a word."""
    pytest.importorskip("matplotlib")
    from distnet.cli.plot import plot_runs
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metrics.jsonl").write_text("")
    a = _run_dir(tmp_path / "a", [2.0, 1.5], {"test_misclass": 7.0})
    plot_runs([str(tmp_path / "empty"), a], str(tmp_path / "p.png"))
    err = capsys.readouterr().err
    assert err == "distnet: warning: empty recorded no epoch (it ended before its first epoch did)\n"


def test_plot_without_matplotlib_says_how_to_get_it(tmp_path, monkeypatch):
    from distnet.cli.plot import plot_runs
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)   # import fails
    with pytest.raises(DistnetError, match=r"pip install 'distnet\[plot\]'"):
        plot_runs([_run_dir(tmp_path / "a", [1.0], {})], str(tmp_path / "x.png"))
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("content, words", [
    (b"\x89PNG\r\n\x1a\n\x00\xff", "not a metrics file"),              # was: UnicodeDecodeError
    (b"5\n", "m.jsonl:1: not a metrics record"),                               # was: AttributeError
    (b'{"epoch": 0}\n', "m.jsonl:1: not a metrics record"),                    # was: KeyError 'cost'
    (b'{"epoch": 0, "cost": "x"}\n', "m.jsonl:1: not a metrics record"),
    (b'{"epoch": "zero", "cost": 1.0}\n', "m.jsonl:1: not a metrics record: epoch 'zero'"),   # was plotted
    (b'{"final": true, "test_misclass": "7%"}\n', "m.jsonl:1: not a metrics record: test_misclass '7%'"),
])
def test_read_run_refuses_what_is_no_metrics_file(tmp_path, content, words):
    from distnet.experiments.rundir import read_run
    (tmp_path / "m.jsonl").write_bytes(content)
    with pytest.raises(DistnetError, match=re.escape(words)):
        read_run(str(tmp_path / "m.jsonl"))


# -- progress bar ------------------------------------------------------------------------------

class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_draws_on_a_terminal_after_a_delay_and_clears_for_log_lines():
    t = [0.0]
    stream = _Tty()
    bar = ProgressBar(stream=stream, clock=lambda: t[0], delay=1.0, interval=0.2)
    logger = get_logger()
    handler = logging.StreamHandler(io.StringIO())
    logger.addHandler(handler)
    try:
        bar.batch(0, 0, 10)
        t[0] = 0.5
        bar.batch(0, 1, 10)
        assert stream.getvalue() == ""                   # short so far: nothing drawn
        t[0] = 2.0
        bar.batch(0, 4, 10)
        shown = stream.getvalue()
        assert shown.startswith("\repoch 1 [") and "] 4/10" in shown and "ETA 3s" in shown
        logger.warning("a log line")                     # erases the bar first
        assert stream.getvalue().endswith("\r" + " " * (len(shown) - 1) + "\r")
    finally:
        bar.close()
        logger.removeHandler(handler)
    assert not handler.filters


def test_progress_bar_is_off_when_not_a_terminal():
    stream = io.StringIO()
    bar = ProgressBar(stream=stream, clock=lambda: 100.0, delay=0)
    assert not bar.enabled
    bar.batch(0, 5, 10)
    bar.close()
    assert stream.getvalue() == ""


# -- fault injection ---------------------------------------------------------------------------

def test_fault_specs():
    assert parse_fault("1:2") == (1, 2, 0) and parse_fault("0:0:3") == (0, 0, 3)
    for bad in ("1", "a:b", "1:2:3:4", "-1:0"):
        with pytest.raises(ConfigError, match="DISTNET_FAULT_INJECT"):
            parse_fault(bad)
    assert fault_hook(0, {}) is None and fault_hook(0, {"DISTNET_FAULT_INJECT": "1:0"}) is None
    hook = fault_hook(1, {"DISTNET_FAULT_INJECT": "1:2:5"})
    hook(2, 4, 10)
    hook(1, 5, 10)
    with pytest.raises(InjectedFault, match="on rank 1 before epoch 2, batch 5"):
        hook(2, 5, 10)
    short = fault_hook(0, {"DISTNET_FAULT_INJECT": "0:0:99"})
    with pytest.raises(InjectedFault):           # past the last batch: the last one
        short(0, 2, 3)


class _FullDisk:
    """A file stream whose writes fail as on a full disk."""

    def write(self, text=""):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    flush = close = write


@pytest.mark.parametrize("fallback", [None, "stderr"])
def test_a_log_file_on_a_full_disk_warns_once_instead_of_a_traceback_per_line(tmp_path, capsys, fallback):
    """log.txt of the run directory (or the experiment's logging filename) on a disk that filled:
    Python's FileHandler printed '--- Logging error ---' and a traceback for every line, and
    raised from close() when the run ended."""
    from distnet.log import LogFile
    handler = LogFile(str(tmp_path / "log.txt"), sys.stderr if fallback else None)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger("distnet.test_full_log")
    log.propagate, log.handlers = False, [handler]
    log.warning("before")
    handler.stream = _FullDisk()
    for epoch in range(3):
        log.warning("epoch %d", epoch)
    handler.close()
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Logging error" not in err, err
    assert err.count(f"distnet: warning: cannot write the log file {tmp_path / 'log.txt'}: No space left on "
                     "device") == 1
    assert ("epoch 0\nepoch 1\nepoch 2\n" in err) == bool(fallback)
    assert (tmp_path / "log.txt").read_text() == "before\n"
