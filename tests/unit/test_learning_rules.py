"""distnet.optim.rules: the YAML learning-rule and schedule objects: built from YAML
through the registry, their errors, and their updates against the steps they wrap (and PyTorch
where installed); neon's update as GradientDescent.neon."""
import numpy as np
import pytest

from distnet.config import Builder, parse_yaml
from distnet.errors import ConfigError
from distnet.layers.params import Param, ParamPlacement
from distnet.optim.rates import LearningRates
from distnet.optim.rules import Adam, AdamW, GradientDescent
from distnet.optim.adam import adam_step
from distnet.optim.schedules import CosineSchedule, LinearWarmup, StepSchedule
from distnet.optim.sgd import MomentumSchedule, sgd_update


def build(text):
    return Builder().build(parse_yaml(text, "rule.yaml"))


class Layer:
    """What LearningRates reads of a layer."""

    def __init__(self, name="w", learning_rate=None):
        self.name, self.learning_rate = name, learning_rate

    def error(self, message, key):
        return ConfigError(f"layer '{self.name}' {message}", key=key)


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
    assert [rule.factor(s, 0) for s in range(1, 12)] == pytest.approx([want(t) for t in range(11)])
    sgd = build("!obj:GradientDescent {momentum: {type: nesterov, coef: 0.9}, weight_decay: 0.0005,"
                " schedule: [!obj:StepSchedule {step_size: 30}]}")
    assert sgd.momentum.nesterov and sgd.state_names == ("velocity",)
    assert sgd.factor(1, 30) == pytest.approx(0.1) and build("!obj:Adam {}").factor(5, 5) is None
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


def test_neon_update_makes_its_velocity_at_the_first_momentum():
    """neon's update (GradientDescent.neon): plain steps while the momentum is 0, keeping no
    velocity; the velocity made (zero) at the first step with momentum, in Param.velocity; each
    step sgd_update's bits. The rule's own GradientDescent keeps a velocity from the start."""
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((2, 3))
    config = {"type": "linear_monotone", "initial_coef": 0.0, "saturated_coef": 0.9, "start_epoch": 1,
              "saturate_epoch": 2}
    mom = MomentumSchedule(config)
    neon, rule = GradientDescent.neon(MomentumSchedule(config)), GradientDescent(momentum=dict(config))
    pp = ParamPlacement("w", w0.shape, w0.shape)
    p, q = Param(pp, w0.copy(), None), Param(pp, w0.copy(), None)
    w, v = w0.copy(), None
    for step, epoch in enumerate([0, 0, 1, 2, 2], start=1):
        g = rng.standard_normal(w0.shape)
        p.grad, q.grad = g.copy(), g.copy()
        neon.apply(p, 0.1, step, epoch)
        rule.apply(q, 0.1, step, epoch)
        if mom(epoch) != 0.0 and v is None:
            v = np.zeros_like(w)
        sgd_update(w, g.copy(), v, 0.1, mom(epoch))
        np.testing.assert_array_equal(p.value, w)
        assert (p.velocity is None) == (v is None) and p.state is None
    np.testing.assert_array_equal(p.velocity, v)
    assert q.velocity is None and set(q.state) == {"velocity"}
    assert not np.array_equal(q.value, p.value)   # the plain steps' gradients stay in its velocity
    assert neon.state_names == rule.state_names == ("velocity",)


def test_learning_rates_resolved_in_one_place():
    """A phase's own rate > the layer's > the rule's > the model's; times the rule's schedule."""
    own, bare = Layer("own", 0.3), Layer("bare")
    sched = GradientDescent(learning_rate=0.1, schedule=[StepSchedule(2, 0.5)])
    assert LearningRates(0.7, sched).source(bare) == (0.1, "rule")
    assert [LearningRates(0.7, sched)(layer, 1, 2) for layer in (own, bare)] == [0.15, 0.05]
    assert LearningRates(0.7, GradientDescent())(bare, 9, 9) == 0.7            # a rule without a rate
    assert LearningRates(0.7)(own, 1, 0) == 0.3 and LearningRates(0.7)(bare, 1, 0) == 0.7
    assert LearningRates(0.7, sched, phase_rate=0.01, phase="x")(own, 5, 5) == 0.01 * 0.5 ** 2
    assert LearningRates(None, Adam()).source(bare) == (0.001, "rule")        # Adam's default counts
    with pytest.raises(ConfigError, match="layer 'bare' has no learning_rate"):
        LearningRates(None, GradientDescent()).check([own, bare])
    assert LearningRates(0.7, sched).describe([own, bare]) == (
        "0.3 (its own learning_rate): own; 0.1 (the learning rule GradientDescent's learning_rate): bare; "
        "times the factor of StepSchedule per epoch")


def test_adam_rule_is_adam_step():
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal(6)
    rule = Adam(learning_rate=0.01, weight_decay=0.1, schedule=[StepSchedule(2, 0.5)], schedule_unit="step")
    w, state = w0.copy(), rule.init_state(w0)
    w2, m, v = w0.copy(), np.zeros(6), np.zeros(6)
    rates = LearningRates(rule=rule)
    for step in range(1, 6):
        g = rng.standard_normal(6)
        rule.update(w, g.copy(), state, step, 0, rates(Layer(), step, 0))
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
        rule.update(w, g.copy(), state, step, 0, LearningRates(rule=rule)(Layer(), step, 0))
        np.testing.assert_allclose(w, p.detach().numpy(), rtol=1e-11, atol=1e-13)
