"""The non-finite parameter check on several ranks: a NaN in one rank's shard of a sharded
(locally connected) parameter stops every rank, the rank that holds it naming the parameter and
the others naming that rank; a finite model passes on every rank with one agreed outcome."""
import logging
import os

import pytest

from distnet.comm.abort import RemoteError
from distnet.config import load_experiment
from distnet.errors import TrainingError
from distnet.models.finite import check_parameters
from tests.tiny import GB, experiment, write_data

MPI_SIZES = (2,)
MPI_TIMEOUT = 120


@pytest.fixture(scope="module")
def gb_dist(comm, shared_tmp):
    path = os.path.join(shared_tmp, "gb_dist.yaml")
    if comm.Get_rank() == 0:
        with open(path, "w") as f:
            f.write(experiment(GB, write_data(os.path.join(shared_tmp, "data.h5")), dist=True))
    comm.Barrier()
    return path


def test_a_nan_in_one_shard_stops_every_rank(comm, gb_dist):
    exp = load_experiment(gb_dist)
    try:
        exp.setup()
    finally:
        logging.getLogger("distnet").handlers.clear()
    check_parameters(exp.model, "after setup")  # finite everywhere: passes on every rank
    layer, p = exp.model._params[0]
    assert layer.name == "lf" and p.sharded
    if comm.Get_rank() == 1:
        p.value.flat[0] = float("nan")
    with pytest.raises((TrainingError, RemoteError)) as e:
        check_parameters(exp.model, "after epoch 3, batch 1")
    if comm.Get_rank() == 1:
        assert isinstance(e.value, TrainingError)
        assert str(e.value).startswith(f"rank 1: parameter '{p.name}' of layer 'lf' holds NaN values after epoch 3")
    else:
        assert isinstance(e.value, RemoteError) and "rank 1: TrainingError: rank 1: parameter" in str(e.value)
