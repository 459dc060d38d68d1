"""Sharded checkpoints move between rank counts, grids and replica counts: 2 epochs on 4 ranks
(a 2x2 grid) -> a sharded checkpoint -> 1 epoch on 9 ranks (a 3x3 grid, or 3 data replicas of
a 1x3 grid) -> a sharded checkpoint -> the last epoch on 1 process, whose weights, velocities
and costs equal the uninterrupted single-process run's (float64, up to summation order: 1e-10).
Every rank reads only the pieces that overlap its slices; only data replica 0 writes, and a
replicated array is written once."""
import json
import logging
import os

import h5py
import numpy as np
import pytest

from distnet.comm import Topology
from distnet.config import load_experiment
from distnet.models import reshard, shard_save
from distnet.models.global_params import model_params
from distnet.models.sharded import read_any
from tests.tiny import CNN, GB, experiment, write_data

MPI_SIZES = (9,)
MPI_TIMEOUT = 300


@pytest.fixture(scope="module")
def files(comm, shared_tmp):
    """The data and the experiments (non-dist and dist) in a folder every rank sees."""
    tmp = shared_tmp
    if comm.Get_rank() == 0:
        write_data(os.path.join(tmp, "data.h5"))
        for name, template in (("cnn", CNN), ("gb", GB)):
            for dist in (False, True):
                with open(os.path.join(tmp, f"{name}{'_dist' if dist else ''}.yaml"), "w") as f:
                    f.write(experiment(template, os.path.join(tmp, "data.h5"), dist))
    comm.Barrier()
    return tmp


def run(path, overrides=(), checkpoint=None, resume=None, topology=None):
    """One experiment run writing sharded checkpoints (collective over ``topology``'s world)."""
    exp = load_experiment(path, list(overrides), record=True)
    exp.checkpoint_path, exp.checkpoint_sharded = checkpoint, True
    try:
        return exp, exp.run(topology=topology, resume=resume)
    finally:
        logging.getLogger("distnet").handlers.clear()


def on(comm, ranks, exp_path, overrides):
    """The topology of ``exp_path`` with ``overrides`` on the first ``ranks`` ranks of ``comm``
    (None on the others)."""
    sub = comm.Split(0 if comm.Get_rank() < ranks else 1, comm.Get_rank())
    if comm.Get_rank() >= ranks:
        sub.Free()
        return None
    layout = load_experiment(exp_path, list(overrides)).layout(sub.Get_size())
    return Topology.from_layout(layout, sub)


def state(ck):
    return [(e["value"], e["velocity"]) for e in ck.params]


@pytest.mark.parametrize("model,second", [("cnn", ["grid=[3, 3]"]), ("gb", ["grid=[3, 3]"]),
                                          ("cnn", ["grid=[1, 3]", "data=3"])])
def test_resume_across_rank_counts(comm, mpi, files, model, second):
    rank = comm.Get_rank()
    single, dist = os.path.join(files, f"{model}.yaml"), os.path.join(files, f"{model}_dist.yaml")
    tag = f"{model}-{'-'.join(second).replace(' ', '')}"
    # the oracle: 4 uninterrupted epochs on one process (each rank computes it alone)
    ref_exp, ref = run(single, checkpoint=os.path.join(files, f"{tag}-ref-{rank}"), topology=Topology.serial())
    want = [(np.array(p.value), None if p.velocity is None else np.array(p.velocity))
            for _, p in model_params(ref_exp.model)]

    # 2 epochs on 4 ranks (2x2) -> A
    a = os.path.join(files, f"{tag}-A")
    first = ["grid=[2, 2]", "model.num_epochs=2"]
    t4 = on(comm, 4, dist, first)
    if t4 is not None:
        run(dist, first, checkpoint=a, topology=t4)
    comm.Barrier()
    # 1 epoch on 9 ranks -> B
    b = os.path.join(files, f"{tag}-B")
    exp9, r9 = run(dist, second + ["model.num_epochs=3"], checkpoint=b, resume=a)
    mpi.assert_all(r9.start_epoch == 2 and np.allclose(r9.epoch_costs, ref.epoch_costs[:3], rtol=1e-10),
                   f"9 ranks: costs {r9.epoch_costs} != {ref.epoch_costs[:3]}")
    io = exp9.checkpoint_io
    mpi.assert_all(io["restore_format"] == "sharded" and io["save_format"] == "sharded", f"{io}")
    # the last epoch on one process (every rank alone) from B
    serial_exp, serial = run(single, checkpoint=os.path.join(files, f"{tag}-C-{rank}"), resume=b,
                             topology=Topology.serial())
    mpi.assert_all(serial.start_epoch == 3 and serial.epoch_costs == pytest.approx(ref.epoch_costs, rel=1e-10),
                   f"1 process: costs {serial.epoch_costs} != {ref.epoch_costs}")
    bad = []
    for i, ((v, vel), (wv, wvel)) in enumerate(zip(state(read_any(os.path.join(files, f"{tag}-C-{rank}"))),
                                                   want)):
        if not np.allclose(v, wv, rtol=1e-10, atol=1e-13):
            bad.append(f"parameter {i} differs by {np.abs(v - wv).max():.3g}")
        if (vel is None) != (wvel is None) or (vel is not None and not np.allclose(vel, wvel, rtol=1e-10, atol=1e-13)):
            bad.append(f"velocity {i} differs")
    mpi.assert_all(not bad, "; ".join(bad))

    # who wrote what: data replica 0 only, a replicated array once
    with h5py.File(os.path.join(b, "index.h5"), "r") as f:
        arrays, shards = json.loads(f.attrs["arrays"]), json.loads(f.attrs["shards"])
    writers = sorted(s["file"] for s in shards)
    nspatial = 9 // int(dict(s.split("=") for s in second).get("data", "1"))
    mpi.assert_all(writers == [shard_save.shard_name(r) for r in range(nspatial)], f"shards {writers}")
    once = [e["name"] for e in arrays if not e["sharded"] and any(len(q) != 1 for q in e["pieces"].values())]
    mpi.assert_all(not once, f"replicated arrays written more than once: {once}")
    split_up = [e["name"] for e in arrays if e["sharded"] and len(e["pieces"]["value"]) == 1]
    mpi.assert_all(nspatial == 1 or not split_up, f"sharded arrays in one piece on {nspatial} ranks: {split_up}")
    comm.Barrier()


def test_consolidate_on_one_rank_equals_the_folder(comm, mpi, files):
    """A 4-rank sharded checkpoint consolidated into one file holds the same state."""
    dist = os.path.join(files, "gb_dist.yaml")
    folder = os.path.join(files, "gb-cons")
    run(dist, ["grid=[1, 3]", "data=3", "model.num_epochs=1"], checkpoint=folder)
    out = os.path.join(files, f"gb-cons-{comm.Get_rank()}.h5")
    reshard.consolidate(folder, out)
    x, y = read_any(folder), read_any(out)
    same = all(np.array_equal(p["value"], q["value"]) and
               ((p["velocity"] is None and q["velocity"] is None) or np.array_equal(p["velocity"], q["velocity"]))
               for p, q in zip(x.params + x.buffers, y.params + y.buffers))
    mpi.assert_all(same and x.epoch == y.epoch == 0 and x.meta["grid"] == y.meta["grid"] == [1, 3],
                   "consolidated file differs")
    comm.Barrier()
