"""distnet.optim.rules: the YAML learning-rule and schedule objects: built from YAML
through the registry, their errors, and their updates against the ops they wrap (and PyTorch
where installed)."""
import numpy as np
import pytest

from distnet.config import Builder, parse_yaml
from distnet.errors import ConfigError
from distnet.optim.rules import Adam, AdamW, GradientDescent
from distnet.optim.adam import adam_step
from distnet.optim.schedules import CosineSchedule, LinearWarmup, StepSchedule
from distnet.optim.sgd import MomentumSchedule, sgd_update


def build(text):
    return Builder().build(parse_yaml(text, "rule.yaml"))


def test_build_from_yaml():
    rule = build("""!obj:distnet.learning_rules.AdamW
    learning_rate: 0.01
    schedule: [!obj:LinearWarmup {warmup: 2}, !obj:CosineSchedule {total: 8, start: 2}]
    schedule_unit: step
    max_grad_norm: 1.0
    """)
    assert isinstance(rule, AdamW) and rule.decoupled and rule.weight_decay == 0.01
    assert rule.max_grad_norm == 1.0 and rule.state_names == ("m", "v")
    want = LinearWarmup(2) * CosineSchedule(8, start=2)
    assert [rule.rate(s, 0) for s in range(1, 12)] == pytest.approx([0.01 * want(t) for t in range(11)])
    sgd = build("!obj:GradientDescent {momentum: {type: nesterov, coef: 0.9}, weight_decay: 0.0005,"
                " schedule: [!obj:StepSchedule {step_size: 30}]}")
    assert sgd.momentum.nesterov and sgd.state_names == ("velocity",)
    assert sgd.rate(1, 30, lr=0.1) == pytest.approx(0.01)
    assert build("!obj:GradientDescent {learning_rate: 0.1}").state_names == ()
    assert build("!obj:MultiStepSchedule {milestones: [3, 6]}")(6) == pytest.approx(0.01)


@pytest.mark.parametrize("text,needle", [
    ("!obj:Adam {beta1: 1.0}", "beta1"),
    ("!obj:Adam {epsilon: 0}", "epsilon"),
    ("!obj:Adam {schedule_unit: minute}", "schedule_unit"),
    ("!obj:Adam {schedule: [!obj:Adam {}]}", "schedule"),
    ("!obj:Adam {schedule: !obj:StepSchedule {step_size: 2}}", "list"),
    ("!obj:GradientDescent {weight_decay: -1}", "weight_decay"),
    ("!obj:GradientDescent {max_grad_norm: 0}", "max_grad_norm"),
    ("!obj:GradientDescent {momentum: {type: sideways}}", "momentum"),
    ("!obj:StepSchedule {step_size: 0}", "step_size"),
    ("!obj:CosineSchedule {total: 5, min_factor: 2}", "min_factor"),
    ("!obj:Adam {betas: [0.9, 0.99]}", "betas"),
    ("!obj:Adam {learning_rate: -0.001}", "learning_rate"),       # gradient ascent, silently
    ("!obj:AdamW {learning_rate: -1}", "learning_rate"),
    ("!obj:GradientDescent {learning_rate: -0.1}", "learning_rate"),
    ("!obj:GradientDescent {momentum: {type: constant, coef: -0.9}}", "momentum"),
])
def test_yaml_errors(text, needle):
    with pytest.raises(ConfigError) as e:
        build(text)
    assert needle in str(e.value)


def test_no_learning_rate_anywhere():
    with pytest.raises(ConfigError, match="learning_rate"):
        GradientDescent().rate(1, 0)


def test_gradient_descent_is_neon_sgd():
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((3, 4))
    config = {"type": "linear_monotone", "initial_coef": 0.5, "saturated_coef": 0.9, "start_epoch": 1,
              "saturate_epoch": 3}
    rule, mom = GradientDescent(momentum=dict(config)), MomentumSchedule(config)
    w, state = w0.copy(), rule.init_state(w0)
    w2, v2 = w0.copy(), np.zeros_like(w0)
    for step in range(1, 6):
        g = rng.standard_normal(w0.shape)
        epoch = step - 1
        rule.update(w, g.copy(), state, step, epoch, lr=0.1)
        sgd_update(w2, g.copy(), v2, 0.1, mom(epoch))
        np.testing.assert_array_equal(w, w2)


def test_adam_rule_is_adam_step():
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal(6)
    rule = Adam(learning_rate=0.01, weight_decay=0.1, schedule=[StepSchedule(2, 0.5)], schedule_unit="step")
    w, state = w0.copy(), rule.init_state(w0)
    w2, m, v = w0.copy(), np.zeros(6), np.zeros(6)
    for step in range(1, 6):
        g = rng.standard_normal(6)
        rule.update(w, g.copy(), state, step, 0)
        adam_step(w2, g.copy(), m, v, step, 0.01 * 0.5 ** ((step - 1) // 2), weight_decay=0.1)
        np.testing.assert_array_equal(w, w2)


def test_adamw_with_cosine_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    w0, gs = rng.standard_normal((4, 3)), [rng.standard_normal((4, 3)) for _ in range(6)]
    p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = torch.optim.AdamW([p], lr=0.01, weight_decay=0.05)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 6)
    rule = AdamW(learning_rate=0.01, weight_decay=0.05, schedule=[CosineSchedule(6)], schedule_unit="step")
    w, state = w0.copy(), rule.init_state(w0)
    for step, g in enumerate(gs, start=1):
        p.grad = torch.from_numpy(g.copy())
        opt.step()
        sched.step()
        rule.update(w, g.copy(), state, step, 0)
        np.testing.assert_allclose(w, p.detach().numpy(), rtol=1e-11, atol=1e-13)
