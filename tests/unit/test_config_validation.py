"""Values a researcher can write that make no sense (a momentum of 1.5, two layers named alike,
contradictory topology keys, ...): refused before training with file:line and key, instead of
a run that silently diverges or gives ambiguous logs."""
import pytest

from distnet.config import load_experiment_text
from distnet.errors import ConfigError
from distnet.experiments.run_notes import note_batch_size
from distnet.optim.sgd import MomentumSchedule

HEADER = """!obj:distnet.experiments.FitPredictErrorExperiment {
  backend: !obj:distnet.backends.Numpy {rng_seed: 0},
  datasets: [!obj:distnet.datasets.MNIST {repo_path: ./nowhere}],
  model: !obj:distnet.models.MLP {
    num_epochs: 1,
    MODEL_KEYS
    layers: [
"""
FOOTER = """    ],
  },
}
"""
FC = ("      !obj:distnet.layers.LayerWithNoBias {nout: 10, weight_init: {type: uniform}, "
      "activation: !obj:distnet.activations.Logistic {}},\n")


def load(layers=FC, model_keys="learning_rate: 0.1,"):
    return load_experiment_text(HEADER.replace("MODEL_KEYS", model_keys) + layers + FOOTER, "exp.yaml")


def error_of(**kw):
    with pytest.raises(ConfigError) as e:
        load(**kw)
    return str(e.value)


# -- momentum and the other decay coefficients ---------------------------------------------------

@pytest.mark.parametrize("momentum", [
    "{type: constant, coef: 1.5}",
    "{type: constant, coef: 1.0}",         # no decay: the velocity sums every gradient ever seen
    "{type: nesterov, coef: .nan}",
    "{type: linear_monotone, initial_coef: 0.5, saturated_coef: 1.2, start_epoch: 0, saturate_epoch: 3}",
])
def test_model_momentum_outside_0_1_is_refused_at_its_line(momentum):
    text = error_of(model_keys=f"learning_rate: 0.1,\n    momentum: {momentum},")
    assert text.startswith("exp.yaml:7: key 'momentum'"), text


def test_momentum_schedule_refuses_bad_coefficients_as_a_library_too():
    for config in ({"type": "constant", "coef": 1.0}, {"type": "nesterov", "coef": -0.1},
                   {"type": "constant", "coef": "0.9"}):
        with pytest.raises(ConfigError, match="momentum"):
            MomentumSchedule(config)
    assert MomentumSchedule({"type": "constant", "coef": 0.99})(7) == 0.99


def test_learning_rule_momentum_outside_0_1_is_refused_at_its_line():
    rule = "learning_rule: !obj:distnet.learning_rules.GradientDescent {\n      momentum: {type: constant, coef: 1.01}},"
    text = error_of(model_keys=rule)
    assert text.startswith("exp.yaml:7: key 'momentum'") and "[0, 1)" in text, text


def test_neon_later_per_layer_momentum_params_are_checked_where_written():
    layer = """      !obj:neon.models.layer.LayerWithNoBias {
        nout: 10, weight_init: {type: uniform},
        learning_rule: !obj:neon.models.learning_rule.GradientDescentMomentum {
          name: lr, lr_params: {learning_rate: 0.1, momentum_params: {type: constant, initial_coef: 1.9}}},
      },
"""
    text = error_of(layers=layer)
    assert text.startswith("exp.yaml:10:") and "initial_coef" in text and "[0, 1)" in text, text


@pytest.mark.parametrize("rule,key", [
    ("!obj:distnet.learning_rules.Adam {beta1: 1.0}", "beta1"),
    ("!obj:distnet.learning_rules.Adam {beta2: -0.5}", "beta2"),
    ("!obj:distnet.learning_rules.AdamW {epsilon: 0.0}", "epsilon"),
    ("!obj:distnet.learning_rules.AdamW {weight_decay: -0.01}", "weight_decay"),
    ("!obj:distnet.learning_rules.GradientDescent {max_grad_norm: .inf}", "max_grad_norm"),
])
def test_adam_keys_outside_their_range_name_file_line_key(rule, key):
    text = error_of(model_keys=f"learning_rule: {rule},")
    assert text.startswith(f"exp.yaml:6: key '{key}'"), text


@pytest.mark.parametrize("layer,key", [
    ("!obj:distnet.layers.DropoutLayer {p: 1.0}", "p"),
    ("!obj:distnet.layers.DropoutLayer {p: -0.1}", "p"),
    ("!obj:distnet.layers.BatchNormLayer {eps: 0}", "eps"),
    ("!obj:distnet.layers.BatchNormLayer {momentum: 1.5}", "momentum"),
])
def test_dropout_and_batch_norm_ranges(layer, key):
    text = error_of(layers=f"      {layer},\n" + FC)
    assert text.startswith(f"exp.yaml:8: key '{key}'"), text


# -- layer names ---------------------------------------------------------------------------------

def test_two_layers_of_one_name_are_refused_naming_both_lines():
    layers = ("      !obj:distnet.layers.Layer {name: fc, nout: 20, weight_init: {type: uniform}},\n"
              "      !obj:distnet.layers.Layer {\n"
              "        name: fc, nout: 10, weight_init: {type: uniform}},\n")
    text = error_of(layers=layers)
    assert text.startswith("exp.yaml:10: key 'name': layer 'fc': the name 'fc' is also the name of layer 0 "
                           "(exp.yaml:8)"), text


def test_unnamed_layers_get_names_no_layer_was_given():
    layers = ("      !obj:distnet.layers.Layer {nout: 20, weight_init: {type: uniform}},\n"
              "      !obj:distnet.layers.Layer {name: Layer0, nout: 10, weight_init: {type: uniform}},\n")
    names = [layer.name for layer in load(layers=layers).model.layers]
    assert names == ["Layer0_", "Layer0"]


# -- process-wide state ---------------------------------------------------------------------------

def test_cli_leaves_the_host_programs_warning_format_alone(tmp_path):
    """A program (or test) that calls a distnet command keeps its own warnings.formatwarning
    (distnet's one-line format is for the time the command runs)."""
    import warnings

    from click.testing import CliRunner

    from distnet.cli.main import main

    def host_format(message, category, filename, lineno, line=None):
        return f"HOST {message}\n"
    before = warnings.formatwarning
    warnings.formatwarning = host_format
    try:
        path = tmp_path / "exp.yaml"
        path.write_text(HEADER.replace("MODEL_KEYS", "learning_rate: 0.1,") + FC + FOOTER)
        r = CliRunner().invoke(main, ["check", str(path)])
        assert r.exit_code == 0 and warnings.formatwarning is host_format, r.output
        assert warnings.formatwarning("careful", UserWarning, "x.py", 1) == "HOST careful\n"
        r = CliRunner().invoke(main, [])            # bare `distnet`: help, exit 0
        assert r.exit_code == 0 and warnings.formatwarning is host_format
    finally:
        warnings.formatwarning = before


# -- topology keys ---------------------------------------------------------------------------------

DATAPAR = """!obj:distnet.experiments.FitPredictErrorExperiment {
  dist_flag: True,
  DATA_KEY
  datasets: [!obj:distnet.datasets.MNIST {repo_path: ./nowhere, dist_flag: True, dist_mode: datapar}],
  model: !obj:distnet.models.MLP {num_epochs: 1, learning_rate: 0.1, layers: [
    !obj:distnet.layers.Layer {name: h, nout: 10, weight_init: {type: uniform}}]},
}
"""


def datapar(data_key=""):
    return load_experiment_text(DATAPAR.replace("DATA_KEY", data_key), "dp.yaml")


def test_datapar_with_a_data_key_that_contradicts_the_launch_is_refused():
    from distnet.errors import TopologyError
    exp = datapar("data: 1,")          # one replica, or every rank one (the default)?
    with pytest.raises(TopologyError) as e:
        exp.layout(4, (1, 28, 28))
    assert str(e.value).startswith("dp.yaml:3: key 'data': dist_mode datapar makes every rank a data "
                                   "replica (4 on 4 ranks), but data is 1; remove data"), e.value
    with pytest.raises(TopologyError, match="set data: 4, or launch 2 rank"):
        datapar("data: 2,").layout(4, (1, 28, 28))
    assert datapar("data: 4,").layout(4, (1, 28, 28)).data == 4
    assert datapar("data: 1,").layout(1, (1, 28, 28)).data == 1
    assert datapar().layout(4, (1, 28, 28)).data == 4       # no data key: all ranks are replicas


def test_vecpar_with_a_grid_of_several_rows_is_refused_at_the_grid_key():
    text = DATAPAR.replace("DATA_KEY", "grid: [2, 2],").replace("dist_mode: datapar", "dist_mode: vecpar") \
        .replace("models.MLP", "models.MLPDist").replace("layers.Layer {", "layers.LayerDist {")
    with pytest.raises(ConfigError) as e:
        load_experiment_text(text, "vp.yaml")
    assert str(e.value).startswith("vp.yaml:3: key 'grid': dist_mode vecpar shards fully connected layers "
                                   "over a 1 x P grid"), e.value
    assert "grid: [1, 4]" in str(e.value)


# -- learning-rate schedules -----------------------------------------------------------------------

@pytest.mark.parametrize("schedule,needle", [
    ("!obj:distnet.schedules.MultiStepSchedule {milestones: [60, 30]}", "increasing"),
    ("!obj:distnet.schedules.MultiStepSchedule {milestones: [30, 30]}", "increasing"),
    ("!obj:distnet.schedules.MultiStepSchedule {milestones: [2.5, 5]}", "expected an integer"),
    ("!obj:distnet.schedules.MultiStepSchedule {milestones: [-5, 5]}", "expected int >= 0"),
    ("!obj:distnet.schedules.StepSchedule {step_size: -2}", "step_size"),
    ("!obj:distnet.schedules.CosineSchedule {total: 0}", "total"),
    ("!obj:distnet.schedules.CosineSchedule {total: 10, min_factor: 1.5}", "[0.0, 1.0]"),
    ("!obj:distnet.schedules.LinearWarmup {warmup: 0}", "warmup"),
])
def test_nonsense_schedules_are_refused_at_their_line(schedule, needle):
    rule = f"learning_rule: !obj:distnet.learning_rules.Adam {{\n      schedule: [{schedule}]}},"
    text = error_of(model_keys=rule)
    assert text.startswith("exp.yaml:7") and needle in text, text


def test_multistep_schedule_as_a_library_refuses_what_it_used_to_round():
    from distnet.optim.schedules import MultiStepSchedule
    for bad in ([2.5], ["30"], [True], [-1], [5, 3]):
        with pytest.raises(ConfigError, match="milestones"):
            MultiStepSchedule(bad)
    assert MultiStepSchedule([3, 6])(6) == pytest.approx(0.01)


# -- batch sizes the data cannot give --------------------------------------------------------------

def test_a_batch_size_larger_than_the_training_set_is_a_warning_at_its_line(tmp_path, restore_logger):
    from click.testing import CliRunner

    from distnet.cli.main import main
    from tests.tiny import CNN, experiment, write_data
    data = write_data(tmp_path / "d.h5", n_train=30)
    path = tmp_path / "exp.yaml"
    path.write_text(experiment(CNN, data).replace("num_epochs: 4, batch_size: 8", "num_epochs: 1, batch_size: 64"))
    r = CliRunner().invoke(main, ["run", str(path), "--no-run-dir", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert f"{path}:5: batch_size 64 is larger than the 30 training images: every epoch is " \
           "one step on all 30" in r.output, r.output


def test_a_batch_size_smaller_than_the_data_replicas_is_a_warning():
    import logging
    exp = datapar()
    exp.model.batch_size = 3
    seen = []
    log = logging.getLogger("test_config_validation")
    log.addHandler(type("H", (logging.Handler,), {"emit": lambda self, r: seen.append(r.getMessage())})())
    note_batch_size(exp, 100, 4, log)
    assert seen == ["dp.yaml:5: batch_size 3 is smaller than the 4 data replicas: 1 of them get no rows of a batch "
                    "(they wait); use a batch_size of at least 4"]


def test_seterr_handling_applies_while_the_experiment_runs_not_after_loading(tmp_path, restore_logger):
    """neon called numpy.seterr when the backend was built: loading a file changed numpy's error
    handling for the whole program (a notebook, a test suite). distnet applies it during run."""
    import numpy as np

    from distnet.comm.topology import Topology
    from distnet.experiments.loop import RunHooks
    from tests.tiny import CNN, experiment, write_data
    text = experiment(CNN, write_data(tmp_path / "d.h5")).replace(
        "{rng_seed: 5}", "{rng_seed: 5, seterr_handling: {all: raise}}").replace("num_epochs: 4", "num_epochs: 1")
    before = np.geterr()
    exp = load_experiment_text(text, "exp.yaml")
    assert np.geterr() == before
    during = []

    class Hooks(RunHooks):
        def epoch(self, record):
            during.append(np.geterr())
    exp.run(topology=Topology.serial(), hooks=Hooks())
    assert during == [{"divide": "raise", "over": "raise", "under": "ignore", "invalid": "raise"}]
    assert np.geterr() == before


def _run_tiny_cnn(tmp_path, replace, args=()):
    from click.testing import CliRunner

    from distnet.cli.main import main
    from tests.tiny import CNN, experiment, write_data
    text = experiment(CNN, write_data(tmp_path / "d.h5", n_train=30))   # 4 steps of 8 per epoch
    for old, new in replace:
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    r = CliRunner().invoke(main, ["run", str(path), "--no-run-dir", "--no-progress", *args])
    assert r.exit_code == 0, r.output
    return path, r.output


RULE = ("momentum: {type: nesterov, coef: 0.5},",
        "learning_rule: !obj:distnet.learning_rules.Adam {UNIT\n"
        "      schedule: [!obj:distnet.schedules.LinearWarmup {warmup: 8},\n"
        "                 !obj:distnet.schedules.MultiStepSchedule {milestones: [12]}]},")


def test_schedules_the_run_ends_before_are_warnings_at_their_lines(tmp_path, restore_logger):
    """4 epochs of 4 steps: in epochs (the default unit) the warm-up stops at 3/8 and the
    milestone never comes; counted in steps both fit, which the warning suggests."""
    path, out = _run_tiny_cnn(tmp_path, [(RULE[0], RULE[1].replace("UNIT", ""))])
    hint = "; t counts epochs (schedule_unit: epoch): if it meant the run's 16 optimiser steps, write schedule_unit: step"
    assert (f"{path}:7: LinearWarmup changes the learning rate until t = 8, after the run's last t = 3: it stops "
            f"at factor 0.375 (its end: 1) (schedule_unit: epoch, num_epochs 4){hint}\n") in out, out
    assert (f"{path}:8: MultiStepSchedule first changes the learning rate at t = 12, after the run's last t = 3: "
            f"its factor is 1 throughout (schedule_unit: epoch, num_epochs 4){hint}\n") in out, out
    _, out = _run_tiny_cnn(tmp_path, [(RULE[0], RULE[1].replace("UNIT", "schedule_unit: step,"))])
    assert "Schedule" not in out and "Warmup" not in out, out
    # a shorter trial run from the command line knows it ends early
    _, out = _run_tiny_cnn(tmp_path, [(RULE[0], RULE[1].replace("UNIT", ""))], ["--set", "model.num_epochs=2"])
    assert "Schedule" not in out and "Warmup" not in out, out


def test_a_warmup_the_run_never_leaves_says_nothing_trains(tmp_path, restore_logger):
    rule = RULE[1].replace("UNIT", "").replace("milestones: [12]", "milestones: [1]").replace("warmup: 8", "warmup: 5")
    path, out = _run_tiny_cnn(tmp_path, [(RULE[0], rule), ("num_epochs: 4", "num_epochs: 1")])
    assert ("LinearWarmup first changes the learning rate at t = 1, after the run's last t = 0: its factor is 0 "
            "throughout (a learning rate of 0: nothing trains)") in out, out


def test_common_schedule_idioms_are_not_warned_about():
    from distnet.optim.schedules import CosineSchedule, LinearWarmup, MultiStepSchedule, StepSchedule, unreached
    assert unreached(CosineSchedule(10), 9) is None                 # T_max = the run's epochs
    assert unreached(CosineSchedule(280, start=40), 319) is None
    assert unreached(MultiStepSchedule([30, 60, 90]), 89) is None   # the last milestone: 1e-3 -> 1e-4
    assert unreached(LinearWarmup(5), 5) is None and unreached(StepSchedule(30), 89) is None
    assert "stops at factor 0.655" in unreached(CosineSchedule(10), 4)
    assert "throughout" in unreached(MultiStepSchedule([30]), 29)


# -- GB -----------------------------------------------------------------------------------------------

def test_gb_pretraining_without_num_pretrain_epochs_is_refused(tmp_path):
    from tests.tiny import GB, experiment
    text = experiment(GB, tmp_path / "none.h5")
    assert load_experiment_text(text, "gb.yaml").model.num_pretrain_epochs == 1
    with pytest.raises(ConfigError) as e:
        load_experiment_text(text.replace("num_pretrain_epochs: 1, ", ""), "gb.yaml")
    assert str(e.value).startswith("gb.yaml:5: key 'pretraining': pretraining is True but num_pretrain_epochs "
                                   "is not given"), e.value
    skip = load_experiment_text(text.replace("num_pretrain_epochs: 1", "num_pretrain_epochs: 0"), "gb.yaml")
    assert skip.model.num_pretrain_epochs == 0


# -- learning rates no parameter uses ----------------------------------------------------------------

def _notes(model_keys, layers=FC):
    return [text for _, text in load(layers=layers, model_keys=model_keys).config_notes]


def test_a_model_learning_rate_beside_a_rule_with_its_own_is_a_note():
    notes = _notes("learning_rate: 0.1,\n    learning_rule: !obj:distnet.learning_rules.AdamW {},")
    assert notes == ["exp.yaml:6: the model's learning_rate 0.1 is not used: the learning rule's (0.001, AdamW's "
                     "default) applies to the layers without their own; give the rate to the learning rule"]
    # GradientDescent has no rate of its own: the model's is the layers' default
    assert _notes("learning_rate: 0.1,\n    learning_rule: !obj:distnet.learning_rules.GradientDescent {},") == []


def test_a_rule_rate_every_layer_overrides_is_a_note():
    layers = FC.replace("nout: 10,", "nout: 10, learning_rate: 0.01,")
    notes = _notes("learning_rule: !obj:distnet.learning_rules.Adam {learning_rate: 0.002},", layers)
    assert notes == ["exp.yaml:6: the learning rule's learning_rate (0.002) is not used: every layer with weights "
                     "gives its own learning_rate, which wins; remove those to use the rule's"]
    # neon's files: a model rate every layer replaces, without a learning rule, is neon's way
    assert _notes("learning_rate: 0.1,", layers) == []


def test_a_last_activation_that_does_not_suit_the_cost_is_a_note():
    identity = FC.replace("Logistic", "Identity")
    assert _notes("learning_rate: 0.1,", identity) == [
        "exp.yaml:8: layer 'LayerWithNoBias0': its activation Identity gives outputs outside [0, 1], but the cost "
        "CrossEntropy takes probabilities: give it activation Logistic (or Softmax), or use cost "
        "SoftmaxCrossEntropy on Identity outputs (logits)"]
    softmax_ce = "learning_rate: 0.1,\n    cost: !obj:distnet.costs.SoftmaxCrossEntropy {},"
    assert _notes(softmax_ce, FC.replace("Logistic", "Softmax")) == [
        "exp.yaml:9: layer 'LayerWithNoBias0': its activation Softmax squashes the logits SoftmaxCrossEntropy "
        "takes (it applies the softmax itself; training is slowed); use activation Identity"]
    assert _notes(softmax_ce, identity) == [] and _notes("learning_rate: 0.1,") == []


def test_a_grid_or_pipe_of_the_file_that_does_not_fit_the_launch_names_its_line():
    from distnet.errors import TopologyError
    text = DATAPAR.replace("dist_mode: datapar", "dist_mode: halopar").replace("models.MLP", "models.MLPDist") \
        .replace("layers.Layer {", "layers.LayerDist {").replace("dist_mode: halopar", "dist_mode: vecpar")
    exp = load_experiment_text(text.replace("DATA_KEY", "grid: [1, 3],"), "g.yaml")
    with pytest.raises(TopologyError) as e:
        exp.layout(4, (1, 28, 28))
    assert str(e.value).startswith("g.yaml:3: key 'grid': grid 1x3 needs 3 ranks, but the run has 4"), e.value
    exp = load_experiment_text(text.replace("DATA_KEY", "pipe: 2,"), "p.yaml")
    with pytest.raises(TopologyError) as e:
        exp.layout(3, (1, 28, 28))
    assert str(e.value).startswith("p.yaml:3: key 'pipe': the run has 3 ranks, which data=1 x pipe=2"), e.value
    exp = load_experiment_text(text.replace("DATA_KEY", ""), "n.yaml")      # the launch alone: no key
    with pytest.raises(TopologyError) as e:
        exp.layout(1000, (1, 28, 28))
    assert not str(e.value).startswith("n.yaml"), e.value


def test_seq2seq_learning_rate_beside_a_rule_with_its_own_is_a_note():
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    text = (root / "experiments" / "seq2seq_numbers.yaml").read_text()
    old = "learning_rule: !obj:distnet.learning_rules.Adam {learning_rate: 0.01, max_grad_norm: 5.0}"
    assert old in text
    assert [n for _, n in load_experiment_text(text, "s.yaml").config_notes] == []
    text = text.replace(old, "learning_rate: 0.05, learning_rule: !obj:distnet.learning_rules.Adam {}")
    notes = [n for _, n in load_experiment_text(text, "s.yaml").config_notes]
    assert len(notes) == 1 and notes[0].endswith(": the model's learning_rate 0.05 is not used: the learning "
                                                 "rule's (0.001, Adam's default) applies; give the rate to the "
                                                 "learning rule"), notes


def test_a_pretrained_layer_in_a_model_that_does_not_pretrain_is_a_note(tmp_path):
    from tests.tiny import GB, experiment
    text = experiment(GB, tmp_path / "none.h5")
    assert [n for _, n in load_experiment_text(text, "gb.yaml").config_notes] == []
    text = text.replace("num_pretrain_epochs: 1, num_initial_epochs: 1, pretraining: True,", "")
    notes = [n for _, n in load_experiment_text(text.replace("models.GB {", "models.Convnet {"), "c.yaml").config_notes]
    assert notes == ["c.yaml:8: layer 'lf': pretraining: True, but the model Convnet does not pretrain (GB and "
                     "GBDist do); use model GB, or remove the layer's pretraining keys"], notes


def test_a_step_decay_that_leaves_no_learning_rate_is_a_warning(tmp_path, restore_logger):
    """StepSchedule {step_size: 2} meant in epochs but counted in steps (schedule_unit: step):
    4 epochs of 4 steps decay the rate 7 times, to 1e-7 at t = 14."""
    rule = ("learning_rule: !obj:distnet.learning_rules.Adam {schedule_unit: step,\n"
            "      schedule: [!obj:distnet.schedules.StepSchedule {step_size: 2}]},")
    path, out = _run_tiny_cnn(tmp_path, [(RULE[0], rule)])
    assert (f"{path}:7: StepSchedule brings the learning-rate factor to 1e-07 at t = 14 and 1e-07 by the run's "
            "last t = 15 (7 decay(s) by 0.1) (schedule_unit: step, num_epochs 4); t counts optimiser steps "
            "(schedule_unit: step): if it meant epochs, write schedule_unit: epoch\n") in out, out
    _, out = _run_tiny_cnn(tmp_path, [(RULE[0], rule.replace("schedule_unit: step,", ""))])
    assert "StepSchedule" not in out, out


def test_schedule_decay_checks_need_no_loop_over_steps():
    from distnet.optim.schedules import CosineSchedule, MultiStepSchedule, StepSchedule, vanishes
    assert "at t = 7 " in vanishes(StepSchedule(1), 10**12)                # instant, not 1e12 steps
    assert vanishes(MultiStepSchedule([30, 60, 90]), 89) is None and vanishes(CosineSchedule(10), 9) is None
    assert vanishes(StepSchedule(30, gamma=1.5), 10**6) is None


def test_a_checkpoint_no_epoch_writes_is_a_warning(tmp_path, restore_logger):
    """checkpoint at_end: False with every 0, or an every the 4 epochs never reach: a warning at
    the checkpoint key (the run wrote nothing without a word); every: 3 writes after epoch 2."""
    from click.testing import CliRunner

    from distnet.cli.main import main
    from tests.tiny import CNN, experiment, write_data
    data, ck, exp = write_data(tmp_path / "d.h5", n_train=30), tmp_path / "ck.h5", tmp_path / "exp.yaml"
    for keys, written in (("{at_end: False}", False), ("{at_end: False, every: 5}", False),
                          ("{at_end: False, every: 3}", True)):
        exp.write_text(experiment(CNN, data).replace(
            "FitPredictErrorExperiment {", f"FitPredictErrorExperiment {{ checkpoint: {keys},", 1))
        ck.unlink(missing_ok=True)
        r = CliRunner().invoke(main, ["run", str(exp), "--no-run-dir", "--no-progress", "--checkpoint", str(ck)])
        assert r.exit_code == 0, r.output
        assert ck.exists() == written
        assert (f"{exp}:1: checkpoint at_end is False and " in r.output) == (not written), r.output
