"""The shipped ResNet experiments (graphs of residual blocks): they build, their shapes and
graph check out, the dist twins are what ``distnet distribute`` makes, and cifar10_resnet.yaml
trains end to end on a synthetic stand-in for CIFAR-10 (random 3x32x32 images in HDF5), in one
process and as the distributed file on a 1x1 grid, with the same numbers."""
import re
from pathlib import Path

import h5py
import numpy as np
import pytest

from distnet.comm import SerialComm, Topology
from distnet.config import load_experiment, load_experiment_text
from distnet.config.builder import config_name

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["mnist_resnet", "mnist_resnet_dist", "cifar10_resnet", "cifar10_resnet_dist"]


@pytest.mark.parametrize("name", NAMES)
def test_shipped_resnets_build(name):
    exp = load_experiment(ROOT / "experiments" / f"{name}.yaml")
    model = exp.model
    assert model.infer_shapes(exp.dataset.image_shape) == (10,)
    assert not model.graph.is_chain
    kinds = {config_name(layer) for layer in model.layers}   # the names the file wrote
    assert {"AddLayer", "GlobalAveragePoolingLayer" + ("Dist" if name.endswith("dist") else "")} <= kinds
    shortcuts = [layer for layer in model.layers if layer.inputs and "short" in layer.name]
    assert shortcuts and all(s.fshape == (1, 1) and s.stride == (2, 2) for s in shortcuts)


@pytest.mark.parametrize("name", ["mnist_resnet", "cifar10_resnet"])
def test_dist_twins_are_distribute_output(name):
    from distnet.cli.distribute import distribute_text
    src = (ROOT / "experiments" / f"{name}.yaml").read_text()
    made = distribute_text(src)
    shipped = (ROOT / "experiments" / f"{name}_dist.yaml").read_text()

    def body(text):   # the YAML without its comment header
        return text[text.index("!obj:"):]
    assert body(made) == body(shipped)


def write_standin(path, n_train=16, n_test=8, seed=0):
    """Random ``(N, 3, 32, 32)`` images, 10 classes; class k brightens channel k % 3's corner."""
    rng = np.random.RandomState(seed)
    with h5py.File(path, "w") as f:
        for split, n in (("train", n_train), ("test", n_test)):
            y = rng.randint(0, 10, n)
            x = rng.uniform(0, 1, (n, 3, 32, 32))
            for i, k in enumerate(y):
                x[i, k % 3, :8, :8] += 1
            f[f"{split}/x"], f[f"{split}/y"] = x, y
        f.attrs["nclasses"] = 10
    return path


def cifar_standin(path, dist):
    text = (ROOT / "experiments" / f"cifar10_resnet{'_dist' if dist else ''}.yaml").read_text()
    dataset = f"!obj:distnet.datasets.HDF5Dataset {{{'dist_flag: True, ' if dist else ''}path: {path}}},"
    text = re.sub(r"!obj:distnet\.datasets\.CIFAR10 \{[^}]*\},", dataset, text)
    text = text.replace("Numpy {rng_seed: 0}", "Numpy64 {rng_seed: 0}")
    exp = load_experiment_text(text, "cifar10_resnet.yaml")
    exp.model.num_epochs, exp.model.batch_size = 1, 8
    return exp


def test_cifar10_resnet_on_a_synthetic_standin(tmp_path):
    data = write_standin(tmp_path / "standin.h5")
    one = cifar_standin(data, dist=False)
    res = one.run(topology=Topology.serial())
    dist = cifar_standin(data, dist=True)
    res_d = dist.run(topology=Topology.from_world(grid=(1, 1), world=SerialComm()))
    assert np.isfinite(res.epoch_costs).all() and len(res.epoch_costs) == 1
    np.testing.assert_allclose(res_d.epoch_costs, res.epoch_costs, rtol=1e-12)
    assert res_d.test_misclass == res.test_misclass
