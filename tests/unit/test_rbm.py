"""RBM and DBN (neon 0.4's ``neon.models.rbm.RBM`` / ``neon.models.dbn.DBN``) against a hand-written
numpy reference of neon's CD-1, step by step: the reference reads the same uniforms (the documented
stream: ``default_rng([seed, 0, layer, step])`` for training, ``[seed, 1, layer, batch]`` for a DBN's
transform of its data), so it draws the same Bernoulli samples, and every weight after every step,
every logged cost and the DBN's data for its upper layer must agree in float64."""
import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.config import load_experiment, load_experiment_text
from distnet.errors import ConfigError
from distnet.experiments.loop import RunHooks
from distnet.layers.rbm import RBMLayer
from distnet.models.rbm import DBN, RBM
from distnet.ops.activations import Logistic

SEED = 3
WI = {"type": "normal", "loc": 0.0, "scale": 0.3}


def sigm(z):
    return 1.0 / (1.0 + np.exp(-z))


def ref_cd1(W_ext, x, u, lr):
    """neon's RBMLayer.positive / negative / update on v = [x, 1]; returns (new W_ext, cost, s+)."""
    v = np.hstack([x, np.ones((len(x), 1))])
    p_plus = sigm(v @ W_ext.T)
    P_plus = p_plus.T @ v
    s_plus = (p_plus > u).astype(float)
    x_minus = sigm(s_plus @ W_ext)                   # every column, the constant unit's too
    p_minus = sigm(x_minus @ W_ext.T)
    P_minus = p_minus.T @ x_minus
    cost = 0.5 * np.sum((x - x_minus[:, :-1]) ** 2)
    return W_ext + lr * (P_plus - P_minus), cost, s_plus


def stream(tag, layer, step, shape):
    return np.random.default_rng([SEED, tag, layer, step]).random(shape)


def build(cls, layers, x_shape, topo=None, **kw):
    m = cls(layers, **kw)
    m.infer_shapes(x_shape)
    m.configure(Numpy64(rng_seed=SEED), topo or Topology.serial())
    m.init_params()
    return m


def W_ext_of(layer):
    return np.hstack([layer.W, layer.b[:, None]])


def test_rbm_cd1_step_by_step_equals_neon_reference():
    rng = np.random.RandomState(0)
    x = rng.rand(10, 1, 2, 3)                        # 10 images of 6 visible units in [0, 1]
    lr, bs = 0.05, 4                                 # batches 4, 4, 2 (a short last one)
    m = build(RBM, [RBMLayer(name="rbm", nin=7, nout=5, weight_init=WI, activation=Logistic())],
              (1, 2, 3), num_epochs=2, batch_size=bs, learning_rate=lr)
    W = W_ext_of(m.layers[0]).copy()
    flat = x.reshape(10, 6)
    m.start()
    step = 0
    for epoch in range(2):
        cost = m.fit_epoch((x, np.zeros(10, int)), epoch)
        ref = []
        for b0 in range(0, 10, bs):
            xb = flat[b0:b0 + bs]
            W, c, _ = ref_cd1(W, xb, stream(0, 0, step, (1, len(xb), 5))[0], lr)
            ref.append(c)
            step += 1
        np.testing.assert_allclose(W_ext_of(m.layers[0]), W, rtol=1e-12, atol=1e-14)
        assert cost == pytest.approx(np.mean(ref), rel=1e-12)   # neon: mean over batches
    assert m.steps == 6


def test_rbm_samples_are_bernoulli_of_the_stream():
    """The first hidden sample is [p+ > u]: with u from the stream, exactly the reference's."""
    rng = np.random.RandomState(1)
    x = rng.rand(6, 4)
    m = build(RBM, [RBMLayer(name="rbm", nout=3, weight_init=WI, activation=Logistic())], (4,),
              num_epochs=1, batch_size=6, learning_rate=0.1)
    W = W_ext_of(m.layers[0]).copy()
    u = stream(0, 0, 0, (1, 6, 3))
    _, s = m.layers[0].cd_gradients(x, u)
    _, _, s_ref = ref_cd1(W, x, u[0], 0.1)
    np.testing.assert_array_equal(s, s_ref)
    assert 0 < s.sum() < s.size   # both outcomes occur: the comparison means something


def test_dbn_greedy_pretraining_equals_reference():
    rng = np.random.RandomState(2)
    x = rng.rand(8, 5)
    lr, bs, E = 0.1, 3, 2
    layers = [RBMLayer(name="l0", nin=6, nout=4, weight_init=WI, activation=Logistic()),
              RBMLayer(name="l1", nin=4, nout=3, weight_init=WI, activation=Logistic())]
    m = build(DBN, layers, (5,), num_epochs=E, batch_size=bs, learning_rate=lr)
    assert m.num_epochs == 2 * E
    W0, W1 = W_ext_of(layers[0]).copy(), W_ext_of(layers[1]).copy()
    m.start()
    costs = [m.fit_epoch((x, None), e) for e in range(m.num_epochs)]
    step, ref_costs = 0, []
    for _ in range(E):                               # layer 0 on the data
        cs = []
        for b0 in range(0, 8, bs):
            W0, c, _ = ref_cd1(W0, x[b0:b0 + bs], stream(0, 0, step, (1, len(x[b0:b0 + bs]), 4))[0], lr)
            cs.append(c)
            step += 1
        ref_costs.append(np.mean(cs))
    h = np.vstack([                                  # its samples, last unit dropped: layer 1's data
        (sigm(np.hstack([x[b0:b0 + bs], np.ones((len(x[b0:b0 + bs]), 1))]) @ W0.T)
         > stream(1, 0, b, (len(x[b0:b0 + bs]), 4)))[:, :-1]
        for b, b0 in enumerate(range(0, 8, bs))]).astype(float)
    np.testing.assert_array_equal(m._inputs[1], h)
    for _ in range(E):
        cs = []
        for b0 in range(0, 8, bs):
            W1, c, _ = ref_cd1(W1, h[b0:b0 + bs], stream(0, 1, step, (1, len(h[b0:b0 + bs]), 3))[0], lr)
            cs.append(c)
            step += 1
        ref_costs.append(np.mean(cs))
    np.testing.assert_allclose(W_ext_of(layers[0]), W0, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(W_ext_of(layers[1]), W1, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(costs, ref_costs, rtol=1e-12)


def test_cd_k_runs_k_gibbs_steps():
    """cd_steps: 2 resamples the hidden units from p- once more before the statistics."""
    rng = np.random.RandomState(4)
    x = rng.rand(5, 3)
    m = build(RBM, [RBMLayer(name="rbm", nout=4, cd_steps=2, weight_init=WI, activation=Logistic())], (3,),
              num_epochs=1, batch_size=5, learning_rate=0.2)
    W = W_ext_of(m.layers[0]).copy()
    u = stream(0, 0, 0, (2, 5, 4))
    m.cd_step(m.layers[0], x, u, 0)          # the model's rate: 0.2
    v = np.hstack([x, np.ones((5, 1))])
    p_plus = sigm(v @ W.T)
    s = (p_plus > u[0]).astype(float)
    vm = sigm(s @ W)
    s = (sigm(vm @ W.T) > u[1]).astype(float)
    vm = sigm(s @ W)
    p_minus = sigm(vm @ W.T)
    np.testing.assert_allclose(W_ext_of(m.layers[0]), W + 0.2 * (p_plus.T @ v - p_minus.T @ vm), rtol=1e-12)


def test_rbm_refuses_what_it_cannot_do():
    layer = dict(weight_init=WI, activation=Logistic())
    with pytest.raises(ConfigError, match="one RBMLayer"):
        RBM([RBMLayer(name="a", nout=3, **layer), RBMLayer(name="b", nout=2, **layer)], 1).check_layers()
    from distnet.ops.costs import CrossEntropy
    with pytest.raises(ConfigError, match="SumSquaredDiffs"):
        RBM([RBMLayer(name="a", nout=3, **layer)], 1, cost=CrossEntropy())


YAML = """!obj:neon.experiments.fit_predict_err.FitPredictErrorExperiment {
  backend: !obj:neon.backends._numpy.Numpy64 {rng_seed: 0},
  datasets: [!obj:distnet.datasets.HDF5Dataset {path: DATA}],
  model: !obj:neon.models.rbm.RBM {
    num_epochs: 1, batch_size: 5, learning_rate: 0.01,
    layers: [!obj:neon.models.layer.RBMLayer {name: v2h, nout: 4, nin: 121,
             activation: !obj:neon.transforms.logistic.Logistic {},
             weight_init: {type: normal, loc: 0.0, scale: 0.01}}],
  },
}
"""


def test_unsupervised_model_in_an_error_rate_experiment_is_refused(tmp_path):
    from tests import tiny
    data = tiny.write_data(tmp_path / "d.h5")
    path = tmp_path / "e.yaml"
    path.write_text(YAML.replace("DATA", str(data)))
    with pytest.raises(ConfigError, match=r"e\.yaml:4.*unsupervised.*FitExperiment"):
        load_experiment(str(path)).check()
    path.write_text(YAML.replace("DATA", str(data)).replace("fit_predict_err.FitPredictErrorExperiment",
                                                            "fit.FitExperiment"))
    load_experiment(str(path)).check()


def test_dbn_fine_tuning_is_backprop_through_the_stack():
    """finetune_epochs after pretraining: SGD on CrossEntropy through [RBM (last unit not passed),
    RBM, Layer], against hand-written backprop from the pretrained weights (batch-mean gradient)."""
    from distnet.layers import FullyConnectedLayer
    rng = np.random.RandomState(6)
    x, labels = rng.rand(7, 5), rng.randint(0, 3, 7)
    lr, bs = 0.3, 4
    layers = [RBMLayer(name="l0", nout=4, weight_init=WI, activation=Logistic()),
              RBMLayer(name="l1", nout=3, weight_init=WI, activation=Logistic()),
              FullyConnectedLayer(name="out", nout=3, weight_init=WI, activation=Logistic())]
    m = build(DBN, layers, (5,), num_epochs=1, finetune_epochs=2, batch_size=bs, learning_rate=0.05,
              finetune_learning_rate=lr)
    assert m.num_epochs == 4 and m.supervised
    m.start()
    for e in range(2):
        m.fit_epoch((x, labels), e)
    Ws = [W_ext_of(layer).copy() for layer in layers]
    costs = [m.fit_epoch((x, labels), e) for e in (2, 3)]
    T = np.eye(3)[labels]
    ref_costs = []
    for _ in range(2):
        total = 0.0
        for b0 in range(0, 7, bs):
            xb, tb = x[b0:b0 + bs], T[b0:b0 + bs]
            ins, h = [], xb
            for k, W in enumerate(Ws):
                v = np.hstack([h, np.ones((len(h), 1))])
                ins.append(v)
                h = sigm(v @ W.T)
                if k == 0:
                    h = h[:, :-1]                    # l0's last unit is not passed on
                if k == 1:
                    h1 = h
                if k == 0:
                    h0 = h
            y = h
            total -= np.sum(tb * np.log(y) + (1 - tb) * np.log(1 - y))
            dz2 = y - tb                             # CrossEntropy on Logistic
            dh1 = dz2 @ Ws[2][:, :-1]
            dz1 = dh1 * h1 * (1 - h1)
            dh0 = dz1 @ Ws[1][:, :-1]
            dz0 = np.hstack([dh0 * h0 * (1 - h0), np.zeros((len(xb), 1))])   # the unit not passed on
            for W, dz, v in zip(Ws, (dz0, dz1, dz2), ins):
                W -= lr * (dz.T @ v) / len(xb)
        ref_costs.append(total / 7)
    for layer, W in zip(layers, Ws):
        np.testing.assert_allclose(W_ext_of(layer), W, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
    # the rates of each epoch (TensorBoard's): CD's of the machine trained, then fine-tuning's
    assert [m.learning_rates(e) for e in range(4)] == [{"l0": 0.05}, {"l1": 0.05}, {"l0": lr, "l1": lr, "out": lr},
                                                       {"l0": lr, "l1": lr, "out": lr}]
    assert m.misclass_rate(x, labels) == pytest.approx(
        100 * np.mean(m.predict(x).argmax(axis=1) != labels))


def test_dbn_fine_tuning_keys_go_together():
    layer = dict(weight_init=WI, activation=Logistic())
    from distnet.layers import FullyConnectedLayer
    with pytest.raises(ConfigError, match="finetune_epochs"):
        DBN([RBMLayer(name="a", nout=3, **layer), FullyConnectedLayer(name="c", nout=2, **layer)], 1)
    with pytest.raises(ConfigError, match="classifier layers"):
        DBN([RBMLayer(name="a", nout=3, **layer)], 1, finetune_epochs=2)
    with pytest.raises(ConfigError, match="RBMLayers first"):
        DBN([FullyConnectedLayer(name="c", nout=2, **layer), RBMLayer(name="a", nout=3, **layer)], 1,
            finetune_epochs=1)


DBN_YAML = """!obj:distnet.experiments.FitPredictErrorExperiment {
  backend: !obj:distnet.backends.Numpy64 {rng_seed: 1},
  datasets: [!obj:distnet.datasets.HDF5Dataset {path: DATA}],
  checkpoint: {every: 1, path: CKPT},
  model: !obj:distnet.models.DBN {
    num_epochs: 2, batch_size: 7, learning_rate: 0.01, shuffle: True,
    finetune_epochs: 2, finetune_learning_rate: 0.1, momentum: {type: constant, coef: 0.5},
    layers: [
      !obj:distnet.layers.RBMLayer {name: a, nout: 6, weight_init: {type: normal, scale: 0.1},
                                    activation: !obj:distnet.activations.Logistic {}},
      !obj:distnet.layers.RBMLayer {name: b, nout: 4, weight_init: {type: normal, scale: 0.1},
                                    activation: !obj:distnet.activations.Logistic {}},
      !obj:distnet.layers.Layer {name: out, nout: 3, weight_init: {type: normal, scale: 0.1},
                                 activation: !obj:distnet.activations.Logistic {}},
    ],
  },
}
"""


class _Stop(Exception):
    pass


@pytest.mark.parametrize("stop_after", [2, 4], ids=["in-layer-1", "in-fine-tuning"])
def test_dbn_resumed_run_equals_an_uninterrupted_one(tmp_path, stop_after):
    """A checkpoint after epoch ``stop_after`` (layer b's pretraining, or fine-tuning) resumes to the
    uninterrupted run's costs and error rates: the samples are keyed by step, the lower layers'
    outputs recomputed, the shuffle state and the velocities restored."""
    from tests import tiny
    data = tiny.write_data(tmp_path / "d.h5")

    def exp(name):
        path = tmp_path / f"{name}.yaml"
        path.write_text(DBN_YAML.replace("DATA", str(data)).replace("CKPT", str(tmp_path / f"{name}.h5")))
        return load_experiment(str(path))

    whole = exp("whole").run(topology=Topology.serial())

    class Stop(RunHooks):
        def epoch(self, record):
            if record["epoch"] == stop_after:
                raise _Stop
    with pytest.raises(_Stop):
        exp("cut").run(topology=Topology.serial(), hooks=Stop())
    resumed = exp("again").run(topology=Topology.serial(), resume=str(tmp_path / "cut.h5"))
    assert len(whole.epoch_costs) == 6
    np.testing.assert_allclose(resumed.epoch_costs, whole.epoch_costs, rtol=1e-12)
    assert resumed.test_misclass == whole.test_misclass and resumed.train_misclass == whole.train_misclass


def test_tiles_are_refused_naming_data_replicas_only():
    """An RBM takes whole images and distributes over data replicas only: the halopar refusal
    names datapar, not vecpar (which it would refuse next)."""
    from pathlib import Path
    text = (Path(__file__).resolve().parents[2] / "experiments" / "mnist_dbn_datapar.yaml").read_text()
    with pytest.raises(ConfigError, match="give its dataset dist_mode: datapar, not halopar") as e:
        load_experiment_text(text.replace("dist_mode: datapar", "dist_mode: halopar"), "dbn.yaml")
    assert "vecpar" not in str(e.value)
