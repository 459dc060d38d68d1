"""distnet.optim's steps (sgd, adam, clipping) and schedules: in-place steps against textbook per-element
loops (several steps, weight decay of both kinds), against PyTorch where it is installed, and
clipping by global norm from shard sums; on every array backend."""
import math

import numpy as np
import pytest

from distnet.errors import ConfigError
from distnet.optim.adam import adam_step, adamw_step
from distnet.optim.clipping import clip_coefficient, scale, sum_of_squares
from distnet.optim.schedules import (ConstantSchedule, CosineSchedule, LinearWarmup, MultiStepSchedule,
                                     ProductSchedule, StepSchedule)
from distnet.optim.sgd import sgd_step
from distnet.testing.backends import make_backend


@pytest.fixture
def be(backend_name):
    return make_backend(backend_name)


STEPS = 4


def grads(shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape), [rng.standard_normal(shape) for _ in range(STEPS)]


def textbook_adam(w0, gs, lrs, b1, b2, eps, wd, decoupled):
    w, out = [float(a) for a in w0.ravel()], []
    m, v = [0.0] * len(w), [0.0] * len(w)
    for t, (g, lr) in enumerate(zip(gs, lrs), start=1):
        g = [float(a) for a in g.ravel()]
        for i in range(len(w)):
            gi = g[i]
            if decoupled:
                w[i] = w[i] - lr * wd * w[i]
            else:
                gi = gi + wd * w[i]
            m[i] = b1 * m[i] + (1 - b1) * gi
            v[i] = b2 * v[i] + (1 - b2) * gi * gi
            mhat, vhat = m[i] / (1 - b1 ** t), v[i] / (1 - b2 ** t)
            w[i] = w[i] - lr * mhat / (math.sqrt(vhat) + eps)
        out.append(np.array(w).reshape(w0.shape))
    return out


def textbook_sgd(w0, gs, lrs, mu, nesterov, wd, decoupled):
    w, v, out = w0.ravel().tolist(), [0.0] * w0.size, []
    for g, lr in zip(gs, lrs):
        g = g.ravel().tolist()
        for i in range(len(w)):
            gi = g[i]
            if decoupled:
                w[i] *= 1 - lr * wd
            else:
                gi += wd * w[i]
            v[i] = mu * v[i] - lr * gi
            w[i] += (mu * v[i] - lr * gi) if nesterov else v[i]
        out.append(np.array(w).reshape(w0.shape))
    return out


@pytest.mark.parametrize("wd,decoupled", [(0.0, False), (0.1, False), (0.1, True)])
@pytest.mark.parametrize("scratch", [False, True])
def test_adam_against_textbook(wd, decoupled, scratch, be):
    w0, gs = grads((3, 4))
    lrs = [0.01, 0.02, 0.005, 0.01]
    want = textbook_adam(w0, gs, lrs, 0.9, 0.999, 1e-8, wd, decoupled)
    w = be.asarray(w0)
    m, v = be.xp.zeros_like(w), be.xp.zeros_like(w)
    sc = be.xp.empty_like(w) if scratch else None
    for t, (g, lr) in enumerate(zip(gs, lrs), start=1):
        adam_step(w, be.asarray(g), m, v, t, lr, weight_decay=wd, decoupled=decoupled, scratch=sc)
        np.testing.assert_allclose(be.to_host(w), want[t - 1], rtol=1e-12, atol=1e-14)


def test_adamw_is_decoupled_adam(be):
    w0, gs = grads((5,), seed=1)
    a, b = be.asarray(w0), be.asarray(w0)
    ma, va, mb, vb = (be.xp.zeros_like(a) for _ in range(4))
    for t, g in enumerate(gs, start=1):
        adamw_step(a, be.asarray(g), ma, va, t, 1e-3)
        adam_step(b, be.asarray(g), mb, vb, t, 1e-3, weight_decay=0.01, decoupled=True)
    np.testing.assert_array_equal(be.to_host(a), be.to_host(b))
    with pytest.raises(ValueError):
        adam_step(a, be.asarray(gs[0]), ma, va, 0, 1e-3)


@pytest.mark.parametrize("mu,nesterov", [(0.0, False), (0.9, False), (0.9, True)])
@pytest.mark.parametrize("wd,decoupled", [(0.0, False), (0.05, False), (0.05, True)])
def test_sgd_against_textbook(mu, nesterov, wd, decoupled, be):
    w0, gs = grads((2, 3), seed=2)
    lrs = [0.1, 0.1, 0.05, 0.2]
    want = textbook_sgd(w0, gs, lrs, mu, nesterov, wd, decoupled)
    w = be.asarray(w0)
    v = be.xp.zeros_like(w) if mu else None
    for i, (g, lr) in enumerate(zip(gs, lrs)):
        sgd_step(w, be.asarray(g), v, lr, mu, nesterov, wd, decoupled)
        np.testing.assert_allclose(be.to_host(w), want[i], rtol=1e-12, atol=1e-14)


def test_float32_steps_keep_dtype(be):
    w = be.asarray(np.ones(4), np.float32)
    m, v = be.xp.zeros_like(w), be.xp.zeros_like(w)
    adam_step(w, be.asarray(np.ones(4), np.float32), m, v, 1, 0.1, weight_decay=0.1)
    sgd_step(w, be.asarray(np.ones(4), np.float32), be.xp.zeros_like(w), 0.1, 0.9, weight_decay=0.1)
    assert w.dtype == m.dtype == v.dtype == np.float32


def test_clip_by_global_norm_from_shards(be):
    rng = np.random.default_rng(3)
    full = [rng.standard_normal((4, 6)), rng.standard_normal(5)]
    norm = math.sqrt(sum((a ** 2).sum() for a in full))
    # shards: the first parameter cut in 3 column blocks, the second whole on one "rank"
    shards = [[full[0][:, :2], full[1]], [full[0][:, 2:3]], [full[0][:, 3:]]]
    total = sum(float(sum_of_squares([be.asarray(s) for s in rank])) for rank in shards)
    assert total == pytest.approx(norm ** 2, rel=1e-13)
    assert float(sum_of_squares([be.asarray(a, np.float32) for a in full])) == pytest.approx(norm ** 2, rel=1e-6)
    factor, n = clip_coefficient(total, 1.0)
    assert n == pytest.approx(norm, rel=1e-13) and factor == pytest.approx(1.0 / (norm + 1e-6), rel=1e-13)
    assert clip_coefficient(total, 10 * norm)[0] == 1.0
    arrays = [be.asarray(a) for a in full]
    scale(arrays, factor)
    clipped = math.sqrt(sum(float(sum_of_squares([a])) for a in arrays))
    assert clipped == pytest.approx(1.0, rel=1e-5)
    assert float(sum_of_squares([])) == 0.0


# ------------------------------------------------------------------------ schedules

def test_schedule_closed_forms():
    assert [StepSchedule(3, 0.5)(t) for t in range(7)] == [1, 1, 1, 0.5, 0.5, 0.5, 0.25]
    multi = MultiStepSchedule([2, 4], 0.1)
    assert [multi(t) for t in (0, 1, 2, 3, 4, 9)] == pytest.approx([1, 1, 0.1, 0.1, 0.01, 0.01])
    c = CosineSchedule(10, min_factor=0.1)
    assert c(0) == 1.0 and c(10) == pytest.approx(0.1) and c(20) == pytest.approx(0.1)
    assert c(5) == pytest.approx(0.55)
    w = LinearWarmup(4, 0.2)
    assert [w(t) for t in range(6)] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0, 1.0])
    both = LinearWarmup(5) * CosineSchedule(10, start=5)
    assert isinstance(both, ProductSchedule)
    assert [both(t) for t in (0, 2, 5, 10, 15, 30)] == pytest.approx([0, 0.4, 1, 0.5, 0, 0])
    three = both * ConstantSchedule(0.5)
    assert three(10) == pytest.approx(0.25) and len(three.schedules) == 3
    assert StepSchedule(2).lr(0.1, 2) == pytest.approx(0.01)


@pytest.mark.parametrize("bad", [lambda: StepSchedule(0), lambda: CosineSchedule(-1),
                                 lambda: LinearWarmup(3, 2.0), lambda: MultiStepSchedule("ab"),
                                 lambda: CosineSchedule(5, start=-1), lambda: StepSchedule("x")])
def test_schedule_errors(bad):
    with pytest.raises(ConfigError):
        bad()


# ------------------------------------------------------------------------ PyTorch

def _torch_run(torch, opt_cls, w0, gs, **kw):
    p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = opt_cls([p], **kw)
    out = []
    for g in gs:
        p.grad = torch.from_numpy(g.copy())
        opt.step()
        out.append(p.detach().numpy().copy())
    return out


@pytest.mark.parametrize("kind", ["adam", "adam_l2", "adamw", "sgd", "sgd_nesterov_l2"])
def test_against_torch_optimisers(kind):
    torch = pytest.importorskip("torch")
    w0, gs = grads((3, 5), seed=4)
    lr = 0.01
    if kind.startswith("adam"):
        wd = {"adam": 0.0, "adam_l2": 0.1, "adamw": 0.1}[kind]
        cls = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
        want = _torch_run(torch, cls, w0, gs, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)
        w, m, v = w0.copy(), np.zeros_like(w0), np.zeros_like(w0)
        for t, g in enumerate(gs, start=1):
            adam_step(w, g.copy(), m, v, t, lr, weight_decay=wd, decoupled=kind == "adamw")
            np.testing.assert_allclose(w, want[t - 1], rtol=1e-12, atol=1e-14)
    else:
        nesterov = kind != "sgd"
        wd = 0.1 if nesterov else 0.0
        want = _torch_run(torch, torch.optim.SGD, w0, gs, lr=lr, momentum=0.9, nesterov=nesterov, weight_decay=wd)
        w, v = w0.copy(), np.zeros_like(w0)
        for t, g in enumerate(gs):
            sgd_step(w, g.copy(), v, lr, 0.9, nesterov, wd)
            np.testing.assert_allclose(w, want[t], rtol=1e-12, atol=1e-14)


def test_against_torch_schedules():
    torch = pytest.importorskip("torch")
    sched = torch.optim.lr_scheduler

    def lrs(make, n):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        s = make(opt)
        out = []
        for _ in range(n):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            s.step()
        return out
    cases = [
        (lambda o: sched.StepLR(o, 3, 0.5), StepSchedule(3, 0.5), 10),
        (lambda o: sched.MultiStepLR(o, [2, 5], 0.1), MultiStepSchedule([2, 5], 0.1), 8),
        (lambda o: sched.CosineAnnealingLR(o, 10, eta_min=0.01), CosineSchedule(10, min_factor=0.1), 11),
        (lambda o: sched.LinearLR(o, 0.25, 1.0, 4), LinearWarmup(4, 0.25), 7),
        (lambda o: sched.SequentialLR(o, [sched.LinearLR(o, 0.1, 1.0, 3), sched.CosineAnnealingLR(o, 8)], [3]),
         LinearWarmup(3, 0.1) * CosineSchedule(8, start=3), 11),
    ]
    for make, ours, n in cases:
        np.testing.assert_allclose([ours.lr(0.1, t) for t in range(n)], lrs(make, n), rtol=1e-10, atol=1e-15)
