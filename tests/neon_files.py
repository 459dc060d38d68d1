"""neon's own experiment files as test fixtures: the ten ``examples/distributed`` files of neon's
later (Jan/Feb 2015) schema in ``tests/data/neon_later/``, all 22 of neon v0.4.0's
``examples/*.yaml`` in ``tests/data/neon_04/`` and the one in ``experiments/``, with small random MNIST /
CIFAR-10 data to run them on.

Only data paths change (``./datasets`` or neon's ``/usr/local/data`` -> a folder of random
images; Iris needs none); on a machine without a GPU the ``gpu`` / ``cudanet`` / ``cudamat`` files
get a CPU backend in place of ``GPUDataDist`` / ``Cudanet`` / ``Cudamat``.
"""
import os
import pickle
from pathlib import Path

import numpy as np

from distnet.data import idx

ROOT = Path(__file__).resolve().parent.parent
LATER = sorted((ROOT / "tests" / "data" / "neon_later").glob("*.yaml"))
NEON04 = (sorted((ROOT / "tests" / "data" / "neon_04").glob("*.yaml"))
          + [ROOT / "experiments" / "neon_mnist_numpy_cnn-20-50-500-10.yaml"])
ALL = LATER + NEON04


def params(paths):
    """``pytest.param`` per file (id: its stem)."""
    import pytest
    return [pytest.param(p, id=p.stem) for p in paths]

_MNIST = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
          "t10k-labels-idx1-ubyte")


#: The data folders the files name: ``./datasets`` (re-serialised files) and neon's own
#: ``/usr/local/data`` (files kept verbatim).
DATA_PATHS = ("./datasets", "/usr/local/data")


def uses_gpu(path):
    """Whether the file ``path`` names a GPU backend (gpu / cudanet / cudamat)."""
    return any(k in Path(path).stem for k in ("gpu", "cudanet", "cudamat"))


def have_gpu():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no cupy, no driver, no device
        return False


def write_data(root, n_train=60, n_test=20, seed=0):
    """Random MNIST (IDX) and CIFAR-10 (python batches) under ``root``; returns ``root``."""
    rng = np.random.RandomState(seed)
    for name, shape in zip(_MNIST, ((n_train, 28, 28), (n_train,), (n_test, 28, 28), (n_test,))):
        top = 10 if len(shape) == 1 else 256
        idx.write_idx(os.path.join(root, "MNIST", name), rng.randint(0, top, shape).astype(np.uint8))
    folder = Path(root) / "CIFAR10" / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        n = n_test if name == "test_batch" else n_train // 5
        batch = {"data": rng.randint(0, 256, (n, 3072)).astype(np.uint8),
                 "labels": [int(v) for v in rng.randint(0, 10, n)]}
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f)
    return root


def text_of(path, data_root, cpu_if_no_gpu=True):
    """The YAML of ``path`` reading ``data_root`` (and on the CPU when there is no GPU, unless
    ``cpu_if_no_gpu`` is False)."""
    text = Path(path).read_text()
    for folder in DATA_PATHS:
        text = text.replace(folder, str(data_root))
    if cpu_if_no_gpu and not have_gpu():
        text = text.replace("neon.backends.gpu.GPUDataDist", "neon.backends.cpu.CPUDataDist")
        text = text.replace("neon.backends._cudanet.Cudanet", "neon.backends._numpy.Numpy")
        text = text.replace("neon.backends._cudamat.Cudamat", "neon.backends._numpy.Numpy")
    return text


def write_experiment(path, data_root, out_dir, cpu_if_no_gpu=True):
    """``path`` rewritten by :func:`text_of` into ``out_dir``; returns the new path."""
    out = Path(out_dir) / Path(path).name
    out.write_text(text_of(path, data_root, cpu_if_no_gpu))
    return out


def tiny_overrides(path):
    """``--set`` values that keep a run short: 2 epochs (GB: 1 pretraining + 1 top-only + 1
    full), float64, all of the (small) training set, batches of 16 images."""
    text = Path(path).read_text()
    out = ["model.num_epochs=2", "backend.dtype=float64", "model.batch_size=16"]
    out.append(("dataset" if "\ndataset:" in text else "datasets.0") + ".sample_pct=100")
    if "num_test_sample" in text:
        out.append("dataset.batch_size=16")  # datapar: the dataset's batch_size is the global one
    if "GBDist" in text or "models.gb.GB" in text:
        out += ["model.num_pretrain_epochs=1", "model.num_initial_epochs=1"]
    return out
