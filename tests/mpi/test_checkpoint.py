"""Checkpoints move between process grids: a checkpoint written on one grid (sharded FC columns
and locally connected filters gathered to their global layout) resumes on another grid, with
data replicas, or on one process, and reaches the weights of an uninterrupted single-process
run (float64, 1e-10). Run on 4 ranks: grids 2x2 and 1x4, data 2 x grid 1x2, and 1 process."""
import logging
import os

import numpy as np
import pytest

from distnet.comm import Topology
from distnet.config import load_experiment
from distnet.models.checkpoint import read_checkpoint
from distnet.models.global_params import model_params
from tests.tiny import CNN, GB, experiment, write_data

MPI_SIZES = (4,)
MPI_TIMEOUT = 180


@pytest.fixture(scope="module")
def files(comm, shared_tmp):
    """The data and the experiments (non-dist and dist) in a folder every rank sees."""
    tmp = shared_tmp
    if comm.Get_rank() == 0:
        write_data(os.path.join(tmp, "data.h5"))
        for name, template in (("cnn", CNN), ("gb", GB)):
            for dist in (False, True):
                path = os.path.join(tmp, f"{name}{'_dist' if dist else ''}.yaml")
                with open(path, "w") as f:
                    f.write(experiment(template, os.path.join(tmp, "data.h5"), dist))
    comm.Barrier()
    return tmp


def run(path, overrides=(), checkpoint=None, resume=None, topology=None):
    """One experiment run (collective over the world unless ``topology`` is serial)."""
    exp = load_experiment(path, list(overrides), record=True)
    exp.checkpoint_path = checkpoint
    try:
        return exp, exp.run(topology=topology, resume=resume)
    finally:
        logging.getLogger("distnet").handlers.clear()


def global_params(exp):
    """A serial model's parameters as {index: (value, velocity)}."""
    return [(np.array(p.value), None if p.velocity is None else np.array(p.velocity))
            for _, p in model_params(exp.model)]


@pytest.mark.parametrize("model", ["cnn", "gb"])
def test_checkpoints_move_between_grids(comm, mpi, files, model):
    rank = comm.Get_rank()
    single, dist = os.path.join(files, f"{model}.yaml"), os.path.join(files, f"{model}_dist.yaml")
    # the oracle: 4 uninterrupted epochs on one process (each rank computes it alone)
    ref_exp, ref = run(single, topology=Topology.serial())
    want = global_params(ref_exp)

    # 2 epochs on a 2x2 grid -> checkpoint (world rank 0 writes it)
    ck_grid = os.path.join(files, f"{model}-2x2.h5")
    run(dist, ["grid=[2, 2]", "model.num_epochs=2"], checkpoint=ck_grid)
    # ... and 2 epochs on one process (every rank its own file)
    ck_single = os.path.join(files, f"{model}-single-{rank}.h5")
    run(single, ["model.num_epochs=2"], checkpoint=ck_single, topology=Topology.serial())
    comm.Barrier()

    # resume the grid's checkpoint on 1x4, on data 2 x 1x2, and on one process; the single
    # process's checkpoint on 2x2
    outs = {}
    for name, path, overrides, source in (
            ("1x4", dist, ["grid=[1, 4]"], ck_grid),
            ("data2x1x2", dist, ["grid=[1, 2]", "data=2"], ck_grid),
            ("2x2 from 1", dist, ["grid=[2, 2]"], os.path.join(files, f"{model}-single-0.h5"))):
        outs[name] = os.path.join(files, f"{model}-{name.replace(' ', '_')}.h5")
        _, result = run(path, overrides, checkpoint=outs[name], resume=source)
        mpi.assert_all(result.start_epoch == 2 and np.allclose(result.epoch_costs, ref.epoch_costs, rtol=1e-10),
                       f"{name}: costs {result.epoch_costs} != {ref.epoch_costs}")
        mpi.assert_all(result.test_misclass == ref.test_misclass, f"{name}: test error differs")
    serial_exp, serial = run(single, resume=ck_grid, topology=Topology.serial())
    comm.Barrier()

    bad = []
    got = {name: [(e["value"], e["velocity"]) for e in read_checkpoint(path).params] for name, path in outs.items()}
    got["1 process from 2x2"] = global_params(serial_exp)
    for name, params in got.items():
        for i, ((v, vel), (wv, wvel)) in enumerate(zip(params, want)):
            if not np.allclose(v, wv, rtol=1e-10, atol=1e-13):
                bad.append(f"{name}: parameter {i} differs by {np.abs(v - wv).max():.3g}")
            if (vel is None) != (wvel is None) or (vel is not None and not np.allclose(vel, wvel, rtol=1e-10, atol=1e-13)):
                bad.append(f"{name}: velocity {i} differs")
    mpi.assert_all(not bad, "; ".join(bad))
    mpi.assert_all(serial.epoch_costs == pytest.approx(ref.epoch_costs, rel=1e-10), "serial resume costs differ")
    meta = read_checkpoint(ck_grid).meta
    mpi.assert_all(meta["grid"] == [2, 2] and meta["size"] == 4, f"meta {meta}")
