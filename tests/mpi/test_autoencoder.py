"""neon's Autoencoder distributed as data replicas: on 2, 3 or 4 ranks it gives the
single-process numbers in float64 (per-epoch costs, reconstruction errors of both splits,
the trained weights), with a short last minibatch that leaves some replicas fewer rows; a grid of
spatial tiles is refused on every rank (a tile's target would be the whole image). The
single-process oracle is the same experiment run on ``Topology.serial()`` on every rank."""
import numpy as np
import pytest

from distnet.comm import Topology
from distnet.config import load_experiment_text

MPI_SIZES = (2, 3, 4)
MPI_TIMEOUT = 300

# Iris (90 training flowers) through 4-3-2-3-4 bias-free layers, batches of 7: the last batch
# has 6 rows, so with 4 replicas two of them get 1 row and two get 2.
AE_YAML = """\
!obj:neon.experiments.fit_predict_err.FitPredictErrorExperiment {
  backend: !obj:neon.backends._numpy.Numpy {rng_seed: 0, dtype: float64},
  datasets: [!obj:neon.datasets.iris.Iris {repo_path: /nowhere}],
  model: !obj:neon.models.autoencoder.Autoencoder {
    num_epochs: 3, batch_size: 7, learning_rate: 0.01,
    momentum: {type: linear_monotone, initial_coef: 0.5, start_epoch: 1, saturate_epoch: 2,
               saturated_coef: 0.9},
    cost: !obj:neon.transforms.sum_squared.SumSquaredDiffs {},
    layers: [
      !obj:neon.models.layer.AELayer {name: enc1, nout: 3, activation: !obj:neon.transforms.logistic.Logistic {},
        weight_init: {type: gaussian, scale: 0.3}},
      !obj:neon.models.layer.AELayer {name: code, nout: 2, activation: !obj:neon.transforms.linear.Identity {},
        weight_init: {type: gaussian, scale: 0.3}},
      !obj:neon.models.layer.AELayer {name: dec1, nout: 3, activation: !obj:neon.transforms.logistic.Logistic {},
        weight_init: {type: gaussian, scale: 0.3}},
      !obj:neon.models.layer.AELayer {name: dec2, nout: 4, activation: !obj:neon.transforms.linear.Identity {},
        weight_init: {type: gaussian, scale: 0.3}},
    ],
  },
}
"""


def test_replicas_equal_one_process(comm):
    ref_exp = load_experiment_text(AE_YAML, "ae.yaml")
    ref = ref_exp.run(topology=Topology.serial())
    exp = load_experiment_text(AE_YAML, "ae.yaml")
    exp.data = comm.Get_size()
    try:
        result = exp.run()
        assert exp.topology.ndata == comm.Get_size()
        np.testing.assert_allclose(result.epoch_costs, ref.epoch_costs, rtol=1e-12)
        # an Autoencoder reports its reconstruction error where other models report misclass
        np.testing.assert_allclose([result.train_misclass, result.test_misclass],
                                   [ref.train_misclass, ref.test_misclass], rtol=1e-12)
        for mine, single in zip(exp.model.layers, ref_exp.model.layers):
            np.testing.assert_allclose(mine.W, single.W, rtol=1e-12, atol=1e-15)
        assert ref.epoch_costs[-1] < ref.epoch_costs[0]        # it learned something
        # every replica holds the same weights
        W = exp.model.layers[0].W
        np.testing.assert_array_equal(comm.bcast(W, root=0), W)
    finally:
        exp.topology.free()


def test_spatial_tiles_are_refused_on_every_rank(comm):
    from distnet.errors import ConfigError
    from distnet.layers import FullyConnectedNoBiasLayer
    from distnet.models import Autoencoder
    from distnet.testing.backends import make_backend
    wi = {"type": "gaussian", "scale": 0.1}
    model = Autoencoder(layers=[FullyConnectedNoBiasLayer(nout=3, weight_init=wi),
                                FullyConnectedNoBiasLayer(nout=16, weight_init=wi)], num_epochs=1)
    model.infer_shapes((1, 4, 4))
    topo = Topology.from_world(grid=(1, comm.Get_size()), world=comm)
    try:
        with pytest.raises(ConfigError, match=f"splits every image over a 1x{comm.Get_size()} grid"):
            model.configure(make_backend("numpy", dtype="float64", rng_seed=0), topo)
    finally:
        topo.free()
    comm.Barrier()   # every rank got here: the refusal needed no collective
