"""The benchmarks' PyTorch twins (benchmarks/workloads.py) are the networks distnet runs: the
first step's loss of each twin, weights copied from distnet's model, equals distnet's in float32
rounding. Without torch the test is skipped (the benchmark installs it, `benchmarks/run.sh`)."""
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

pytest.importorskip("torch")


@pytest.mark.parametrize("workload", ["mnist_cnn", "local", "resnet", "unet", "unet3d"])
def test_twin_loss_equals_distnet(workload):
    import benchmarks.workloads as workloads

    twin = workloads.torch_twin(workload)
    ours = workloads.DistnetRun(workload, workloads.serial_topology(workload))
    assert math.isclose(float(twin()), float(ours.step()), rel_tol=1e-5)
