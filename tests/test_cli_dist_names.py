"""A distributed file that still names a layer by its plain class (``ConvLayer`` beside
``ConvLayerDist``, ``Layer`` beside ``LayerDist``): a layer distributes itself from its
placement, so the names are the same class. ``check`` and ``run`` under ``mpiexec`` agree on
such a file (both accept it), and the run trains to the numbers of the single-process file.
"""
import json
import subprocess
import sys

import numpy as np
import pytest

from distnet.comm.launcher import launch_env, mpiexec_path
from tests.tiny import CNN, experiment, write_data


def _distnet(tmp_path, n, *args):
    cmd = ["timeout", "180"] + ([mpiexec_path(), "-n", str(n)] if n > 1 else []) + [sys.executable, "-m", "distnet"]
    return subprocess.run(cmd + list(args), cwd=tmp_path, env=launch_env(n), capture_output=True, text=True)


def _costs(metrics_file):
    return [json.loads(line)["cost"] for line in metrics_file.read_text().splitlines()
            if line.strip() and "cost" in json.loads(line)]


@pytest.mark.parametrize("plain", ["ConvLayer", "Layer"])
def test_plain_layer_names_in_a_dist_file_check_and_run_alike(tmp_path, plain):
    data = write_data(tmp_path / "data.h5")
    single = tmp_path / "single.yaml"
    single.write_text(experiment(CNN, data))
    dist_text = experiment(CNN, data, dist=True)
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(dist_text.replace(f"layers.{plain}Dist {{", f"layers.{plain} {{", 1))
    assert mixed.read_text() != dist_text

    checked = _distnet(tmp_path, 2, "check", "mixed.yaml")
    assert checked.returncode == 0, checked.stderr
    assert "mixed.yaml: OK" in checked.stdout and "grid 1x2" in checked.stdout, checked.stdout

    runs = {}
    for name, n in (("single", 1), ("mixed", 2)):
        r = _distnet(tmp_path, n, "run", f"{name}.yaml", "--no-progress", "--no-run-dir", "--no-checkpoint",
                     "--metrics", f"{name}.jsonl")
        assert r.returncode == 0, r.stderr
        runs[name] = _costs(tmp_path / f"{name}.jsonl")
    assert len(runs["single"]) == 4
    np.testing.assert_allclose(runs["mixed"], runs["single"], rtol=1e-12)
