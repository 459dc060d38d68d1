"""neon's own files run distributed and give the one-process numbers: the ten
``examples/distributed`` files of neon's later schema (halopar CNN and GB, vecpar MLP, datapar
CNN/MLP; ``tests/data/neon_later``), the 22 neon v0.4.0 files of ``tests/data/neon_04`` and the
one in ``experiments/``, each on tiny random data (``tests/neon_files.py``), 2 epochs in float64, on 4 ranks against the serial run of the
same file (costs to 1e-9, identical error rates). A non-distributed neon 0.4 file runs as 4
data replicas, without its dataset cache (a path without ``{rank}``, which 4 replicas would share).
"""
import tempfile

import numpy as np
import pytest

from distnet.comm import Topology
from distnet.config import load_experiment
from tests import neon_files

MPI_SIZES = (4,)
MPI_TIMEOUT = 600


@pytest.fixture(scope="module")
def folder():
    d = tempfile.mkdtemp(prefix="distnet-neon-files-")   # one per rank: no shared files
    neon_files.write_data(d)
    return d


@pytest.mark.parametrize("path", neon_files.params(neon_files.ALL))
def test_neon_file_on_4_ranks_equals_one_process(comm, folder, path):
    exp_path = neon_files.write_experiment(path, folder, folder)
    overrides = neon_files.tiny_overrides(path)
    text = path.read_text()
    shared_cache = any(f"serialized_path: {d}" in text or f"serialized_path: '{d}" in text
                       for d in neon_files.DATA_PATHS)
    if shared_cache and "{rank}" not in text:
        overrides.append("datasets.0.serialized_path=")   # one cache file would serve 4 replicas
    with np.errstate(all="ignore"):   # some files set seterr_handling {all: warn}
        ref = load_experiment(str(exp_path), overrides).run(topology=Topology.serial())
        exp = load_experiment(str(exp_path), overrides)
        if not exp.dist_flag:   # the neon 0.4 non-dist file: spread it as data replicas
            exp.data = comm.Get_size()
        try:
            result = exp.run()
            assert exp.topology.size == comm.Get_size()
        finally:
            if getattr(exp, "topology", None) is not None:
                exp.topology.free()
    np.testing.assert_allclose(result.epoch_costs, ref.epoch_costs, rtol=1e-9)
    assert result.train_misclass == pytest.approx(ref.train_misclass, abs=1e-9)
    assert result.test_misclass == pytest.approx(ref.test_misclass, abs=1e-9)
