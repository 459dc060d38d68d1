"""Backends: numpy float32/float64, and the GPU backend's clear refusal where cupy or a GPU is
missing (the CUDA code paths themselves only run where a GPU is present)."""
import importlib.util

import numpy as np
import pytest

from distnet.backend import GPU, Numpy, Numpy64, get_array_module
from distnet.config import load_experiment_text
from distnet.errors import ConfigError

HAS_CUPY = importlib.util.find_spec("cupy") is not None


def test_numpy_backends():
    assert Numpy().dtype == np.float32 and Numpy64().dtype == np.float64
    assert Numpy(dtype="float64").dtype == np.float64
    with pytest.raises(ConfigError, match="dtype"):
        Numpy(dtype="float16")
    assert get_array_module(np.zeros(2)) is np


def test_weight_rng_is_neons_legacy_stream():
    a = Numpy(rng_seed=0).rng.uniform(-0.1, 0.1, (3, 2))
    np.random.seed(0)
    np.testing.assert_array_equal(a, np.random.uniform(-0.1, 0.1, (3, 2)))


@pytest.mark.skipif(HAS_CUPY, reason="cupy is installed here")
def test_gpu_backend_without_cupy_is_a_clear_config_error():
    with pytest.raises(ConfigError, match="needs cupy"):
        GPU()
    text = ("!obj:distnet.experiments.FitExperiment {\n"
            "  backend: !obj:neon.backends.gpu.GPU {rng_seed: 1},\n"
            "  datasets: [], model: !obj:distnet.models.MLP {layers: [], num_epochs: 1}}\n")
    with pytest.raises(ConfigError) as e:
        load_experiment_text(text, "gpu.yaml")
    assert "gpu.yaml:2" in str(e.value)
    # both wheels, and how to tell which one the machine needs
    for words in ("distnet[gpu-cuda12]", "12.x (NVIDIA driver >= 525.60)", "distnet[gpu-cuda13]",
                  "13.x (driver >= 580)", "`nvidia-smi`'s \"CUDA Version\""):
        assert words in str(e.value), words


def test_a_cupy_wheel_newer_than_the_driver_is_told_to_take_the_other_extra(monkeypatch):
    """cupy-cuda13x imports on a driver for CUDA 12 and fails at its first CUDA call."""
    import sys
    import types

    def no_driver():
        raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient for "
                           "CUDA runtime version")
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=no_driver)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    with pytest.raises(ConfigError, match="no usable CUDA device") as e:
        GPU()
    assert "newer CUDA than the driver runs" in str(e.value) and "distnet[gpu-cuda12]" in str(e.value)
