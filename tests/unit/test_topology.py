"""Grid choice and its error messages, Topology.serial, SerialComm, and the comm package on one
process (no mpi4py, no launcher)."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from distnet.comm import (IN_PLACE, GlobalArray, RemoteError, SerialComm, Topology,
                          allreduce_scalars, allreduce_sum, choose_grid, in_place, run_collectively,
                          valid_grids)
from distnet.comm.topology import check_grid, factor_pairs, working_sizes
from distnet.errors import DistnetError, TopologyError
from distnet.geometry import Window, plan_halo


class FakeWorld(SerialComm):
    """A SerialComm that claims ``size`` ranks: enough to reach from_world's size checks."""

    def __init__(self, size):
        super().__init__("fake")
        self._size = size

    def Get_size(self):
        return self._size


def _run(code, env=None):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=env, timeout=60)


# -- grid choice -------------------------------------------------------------------------------

@pytest.mark.parametrize("n,grid", [(1, (1, 1)), (2, (1, 2)), (3, (1, 3)), (4, (2, 2)), (6, (2, 3)),
                                    (7, (1, 7)), (8, (2, 4)), (9, (3, 3)), (12, (3, 4)), (16, (4, 4)),
                                    (18, (3, 6))])
def test_choose_grid_most_square_rows_first(n, grid):
    assert choose_grid(n) == grid
    assert choose_grid(n, [(100, 100)]) == grid


def test_choose_grid_respects_planes():
    assert choose_grid(4, [(28, 28), (1, 12)]) == (1, 4)   # one row: a single grid row
    assert choose_grid(4, [(28, 28), (12, 1)]) == (4, 1)
    assert choose_grid(6, [(2, 30)]) == (2, 3)
    assert choose_grid(6, [(30, 2)]) == (3, 2)
    assert choose_grid(6, [(1, 30)]) == (1, 6)


@pytest.mark.parametrize("n", range(1, 25))
def test_valid_grids_brute_force(n):
    planes = [(5, 7), (3, 9)]
    fits = [(py, px) for py in range(1, n + 1) for px in range(1, n + 1)
            if py * px == n and all(h >= py and w >= px for h, w in planes)]
    got = valid_grids(n, planes)
    assert sorted(got) == sorted(fits)
    assert got == sorted(got, key=lambda g: (max(g), g[0]))  # best first
    if fits:
        assert choose_grid(n, planes) == got[0]
    assert (n in working_sizes(planes, limit=30)) == bool(fits)
    assert factor_pairs(n) == [(py, n // py) for py in range(1, n + 1) if n % py == 0]


def test_no_grid_error_names_planes_and_working_counts():
    with pytest.raises(TopologyError) as e:
        choose_grid(7, [(5, 28), (5, 5)])
    msg = str(e.value)
    assert "7 spatial ranks" in msg
    assert "1x7 fails on plane 5x5: 5 columns < 7" in msg
    assert "7x1 fails on plane 5x28: 5 rows < 7" in msg
    assert "1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 15, 16" in msg  # the counts that would work


def test_check_grid_errors():
    with pytest.raises(TopologyError, match=r"grid 3x3 needs 9 ranks, but the run has 4\. "
                                            r"Grids of 4 spatial ranks that fit: 2x2, 1x4, 4x1"):
        check_grid((3, 3), 4, [(28, 28)])
    with pytest.raises(TopologyError, match="cannot cut plane 28x3: 3 columns < 4.*fit: 2x2, 4x1"):
        check_grid((1, 4), 4, [(28, 3)])
    with pytest.raises(TopologyError, match="grid must be positive integers, one per spatial axis"):
        check_grid((0, 4), 4)
    with pytest.raises(TopologyError, match="grid must be integers, one per spatial axis"):
        check_grid("ab", 4)
    assert check_grid([2, "2"], 4) == (2, 2)


def test_from_world_size_errors():
    with pytest.raises(TopologyError, match="grid 3x3 needs 9 ranks, but the run has 4"):
        Topology.from_world(grid=(3, 3), world=FakeWorld(4))
    with pytest.raises(TopologyError,
                       match="grid 2x2 x 2 data/pipe replicas needs 8 ranks, but the run has 6"):
        Topology.from_world(grid=(2, 2), data=2, world=FakeWorld(6))
    with pytest.raises(TopologyError, match="6 ranks, which data=4 x pipe=1 does not divide"):
        Topology.from_world(data=4, world=FakeWorld(6))
    with pytest.raises(TopologyError,
                       match=r"14 ranks = data 2 x pipe 1 x 7 spatial.*World sizes that work: 2, 4, 6"):
        Topology.from_world(data=2, planes=[(5, 5)], world=FakeWorld(14))
    with pytest.raises(TopologyError, match="pipe must be a positive integer"):
        Topology.from_world(pipe=0, world=FakeWorld(2))
    assert issubclass(TopologyError, DistnetError)


# -- topologies without MPI ---------------------------------------------------------------------

def test_serial_topology():
    t = Topology.serial()
    assert (t.grid, t.coords, t.rank, t.size, t.is_root) == ((1, 1), (0, 0), 0, 1, True)
    assert t.nspatial == 1 and (t.ndata, t.npipe, t.data_index, t.pipe_index) == (1, 1, 0, 0)
    for comm in (t.world, t.spatial, t.data, t.pipe, t.grad):
        assert isinstance(comm, SerialComm) and comm.Get_size() == 1
    assert "grid 1x1" in repr(t)
    t.free()
    assert t.spatial is None


def test_from_world_on_serial_comm():
    t = Topology.from_world(planes=[(4, 4)], world=SerialComm())
    assert t.grid == (1, 1) and t.coords == (0, 0) and t.spatial.Get_topo()[0] == [1, 1]


def test_importing_comm_and_serial_run_need_no_mpi4py():
    out = _run("""
        import sys
        import numpy as np
        import distnet, distnet.comm, distnet.comm.topology, distnet.comm.global_array
        from distnet.comm import Topology, allreduce_sum
        t = Topology.serial()
        allreduce_sum([np.ones(3)], t.grad)
        assert "mpi4py" not in sys.modules, "mpi4py was imported"
        print("ok")
    """)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


# -- SerialComm ---------------------------------------------------------------------------------

def test_serial_comm_collectives():
    c = SerialComm()
    assert (c.Get_rank(), c.Get_size(), c.rank, c.size) == (0, 1, 0, 1)
    a, b = np.arange(4.0), np.zeros(4)
    c.Allreduce(a, b)
    np.testing.assert_array_equal(b, a)
    c.Allreduce([a * 2, None], [b, None])  # mpi4py-style [buffer, datatype] specs
    np.testing.assert_array_equal(b, a * 2)
    c.Allreduce(IN_PLACE, b)
    np.testing.assert_array_equal(b, a * 2)
    c.Barrier()
    assert c.allreduce(5) == 5 and c.bcast("x") == "x" and c.allgather(3) == [3]
    assert c.gather(1) == [1]
    assert in_place(c) is IN_PLACE
    with pytest.raises(ValueError):
        c.bcast(1, root=1)


def test_serial_comm_accepts_mpi4py_in_place_by_type_name():
    InPlaceType = type("InPlaceType", (), {})  # what mpi4py's MPI.IN_PLACE is an instance of
    b = np.ones(2)
    SerialComm().Allreduce(InPlaceType(), b)
    np.testing.assert_array_equal(b, 1)


def test_serial_comm_cartesian():
    c = SerialComm()
    assert c.Get_coords(0) == [0, 0] and c.Get_cart_rank((0, 0)) == 0
    assert c.Get_topo() == ([1, 1], [False, False], [0, 0])
    assert isinstance(c.Create_cart([1, 1]), SerialComm) and c.Split(0, 0) is c
    with pytest.raises(ValueError, match="outside the 1x1 grid"):
        c.Get_cart_rank((0, 1))
    with pytest.raises(ValueError):
        c.Create_cart([2, 1])


def test_serial_comm_abort_exits_with_code():
    out = _run("from distnet.comm import SerialComm\nSerialComm().Abort(3)\nprint('not reached')")
    assert out.returncode == 3 and "not reached" not in out.stdout


# -- comm operations on one process ---------------------------------------------------------------

@pytest.mark.parametrize("wy,wx", [(Window(3, 1, 1, 1), Window(3, 1, 1, 1)),
                                   (Window(2, 2), Window(3, 2, 0, 1)),
                                   (Window(1, 1, 2, 3), Window(5))])
def test_global_array_serial_is_zero_padding(wy, wx):
    plan = plan_halo((7, 9), wy, wx, (1, 1), (0, 0))
    ga = GlobalArray(plan, Topology.serial().spatial)
    x = np.random.RandomState(0).standard_normal((2, 3, 7, 9))
    chunk = ga.get_fprop_view(x)
    c = plan.chunk
    padded = np.pad(x, ((0, 0), (0, 0), (5, 5), (5, 5)))
    np.testing.assert_array_equal(chunk, padded[..., c.y0 + 5:c.y1 + 5, c.x0 + 5:c.x1 + 5])
    g = np.random.RandomState(1).standard_normal(chunk.shape)
    total = np.zeros_like(padded)
    total[..., c.y0 + 5:c.y1 + 5, c.x0 + 5:c.x1 + 5] = g
    np.testing.assert_array_equal(ga.get_bprop_view(g), total[..., 5:12, 5:14])
    assert np.vdot(chunk, g) == pytest.approx(np.vdot(x, ga.get_bprop_view(g)), rel=1e-12)


def test_global_array_checks_plan_and_shapes():
    w = Window(3, 1, 1, 1)
    with pytest.raises(ValueError, match="plan for a"):
        GlobalArray(plan_halo((8, 8), w, w, (1, 2), (0, 0)), SerialComm())
    ga = GlobalArray(plan_halo((8, 8), w, w, (1, 1), (0, 0)), SerialComm())
    with pytest.raises(ValueError, match=r"x_local must have shape \(B, C, 8, 8\)"):
        ga.exchange(np.zeros((1, 1, 8, 7)))
    with pytest.raises(ValueError, match="g_chunk"):
        ga.exchange_adjoint(np.zeros((1, 1, 8, 8)))
    assert ga.chunk_shape == (10, 10) and ga.local_shape == (8, 8) and ga.out_shape == (8, 8)


def test_reductions_on_one_process_do_nothing():
    a, b = np.arange(3.0), np.ones((2, 2), np.float64)
    out = allreduce_sum([a, b], SerialComm())
    assert out[0] is a and out[1] is b
    np.testing.assert_array_equal(a, np.arange(3.0))
    assert allreduce_scalars([1, 2.5], SerialComm()) == [1.0, 2.5]


def test_run_collectively_on_one_process():
    assert run_collectively(lambda x: x + 1, SerialComm(), 1) == 2
    with pytest.raises(KeyError):
        run_collectively(lambda: {}["k"], SerialComm())
    assert "rank 3: ValueError: x" in str(RemoteError([(3, "ValueError: x")]))


class _TwoRanks:
    """The second of two ranks, whose outcomes the root gathers: the first's is ``first``
    (this process plays the root too: it makes the verdict it broadcasts)."""

    def __init__(self, first):
        self.first = first

    def Get_size(self):
        return 2

    def gather(self, mine, root=0):
        return [self.first, mine]

    def bcast(self, value, root=0):
        return value


def test_run_collectively_gives_every_rank_the_exit_code_of_the_first_failing_rank():
    from distnet.errors import ConfigError, DataError
    config = ("ConfigError: f.yaml:3: bad", 2, ("f.yaml:3", None, "bad"))
    with pytest.raises(RemoteError) as e:           # rank 1 succeeded: rank 0's ConfigError's code
        run_collectively(lambda: None, _TwoRanks(config))
    assert e.value.exit_code == 2 and e.value.failures == [(0, "ConfigError: f.yaml:3: bad")]

    def fail():
        raise DataError("data.h5: truncated")
    with pytest.raises(DataError) as e:             # rank 1 failed too, after rank 0: rank 0's code
        run_collectively(fail, _TwoRanks(config))
    assert e.value.exit_code == 2 and DataError.exit_code == 1
    with pytest.raises(RemoteError) as e:
        run_collectively(lambda: None, _TwoRanks(("DataError: x", 1, None)))
    assert e.value.exit_code == 1 and ConfigError("x").exit_code == 2


def test_run_collectively_one_config_error_found_by_every_rank_is_said_in_one_text():
    """A key of the file each rank finds wrong in its own tile (a scale that overflows the
    tile's values): every rank says the lowest failing rank's words, not its own tile's."""
    from distnet.errors import ConfigError, DataError
    first = ("ConfigError: f.yaml:3: key 'scale': values 1 .. 9 overflow", 2, ("f.yaml:3", "scale", "values 1 .. 9 overflow"))

    def fail(where="f.yaml:3", key="scale"):
        def f():
            raise ConfigError("values 4 .. 7 overflow", where, key)
        return f
    with pytest.raises(ConfigError) as e:
        run_collectively(fail(), _TwoRanks(first))
    assert str(e.value) == "f.yaml:3: key 'scale': values 1 .. 9 overflow" and e.value.exit_code == 2
    for other in (fail("f.yaml:4"), fail(key="mean")):     # another setting: this rank's own words
        with pytest.raises(ConfigError, match="values 4 .. 7"):
            run_collectively(other, _TwoRanks(first))

    def data():
        raise DataError("image 3 holds NaN")
    with pytest.raises(DataError, match="image 3"):    # data: each rank's own finding
        run_collectively(data, _TwoRanks(("DataError: image 1 holds NaN", 1, None)))


# -- abort hook ---------------------------------------------------------------------------------

ABORT_SCRIPT = """
    import os, sys
    from distnet.comm import SerialComm, install_abort_hook

    class Two(SerialComm):
        def Get_rank(self): return 1
        def Get_size(self): return 2
        def Abort(self, code=1):
            sys.stderr.write("ABORT %d\\n" % code); sys.stderr.flush(); os._exit(7)

    install_abort_hook(Two())
    def inner(): raise ValueError("boom")
    inner()
"""


def test_abort_hook_prints_rank_and_aborts():
    out = _run(ABORT_SCRIPT)
    assert out.returncode == 7
    assert "[rank 1] ValueError: boom" in out.stderr and "ABORT 1" in out.stderr
    assert "Traceback" not in out.stderr


def test_abort_hook_traceback_with_debug():
    import os
    out = _run(ABORT_SCRIPT, env=dict(os.environ, DISTNET_DEBUG="1"))
    assert out.returncode == 7 and "Traceback" in out.stderr and "in inner" in out.stderr


def test_abort_hook_single_rank_keeps_normal_traceback():
    out = _run("""
        from distnet.comm import SerialComm, install_abort_hook
        install_abort_hook(SerialComm())
        raise ValueError("plain")
    """)
    assert out.returncode == 1 and "Traceback" in out.stderr and "ValueError: plain" in out.stderr


def test_the_input_images_are_a_plane_to_cut_without_window_layers():
    """A model with no window layer (batch norm and FC on the tiles) still takes tiles of the
    images: a grid that cannot cut them is refused naming them (it got past the check and died
    in the dataset's tiling with 'cannot split length 3 into 4 non-empty blocks')."""
    from distnet.layers import FullyConnectedLayer
    from distnet.layers.batchnorm import BatchNormLayer
    from distnet.models import Model
    from distnet.models.mlp_dist import MLPDist
    WI3 = {"type": "uniform", "low": -0.1, "high": 0.1}
    model = Model(layers=[BatchNormLayer(name="bn"), FullyConnectedLayer(name="out", nout=3, weight_init=WI3)], num_epochs=1)
    model.infer_shapes((1, 4, 3))
    assert (4, 3, "the input images") in model.planes()
    with pytest.raises(TopologyError, match=r"grid 1x4 cannot cut plane 4x3 \(the input images\): 3 columns < 4"
                                            r".*fit: 2x2, 4x1"):
        check_grid((1, 4), 4, model.planes())
    assert choose_grid(4, model.planes()) == (2, 2)
    with pytest.raises(TopologyError, match=r"1x5 fails on plane 4x3 \(the input images\)"):
        choose_grid(5, model.planes())
    vecpar = MLPDist(layers=[FullyConnectedLayer(name="out", nout=3, weight_init=WI3)], num_epochs=1)   # whole images: no tiles
    vecpar.infer_shapes((1, 4, 3))
    assert vecpar.planes() == [(1, 12)]


def test_serial_topology_and_global_array_of_volumes():
    """One process, 3 spatial axes: a 1x1x1 grid, and the exchange is zero padding."""
    topo = Topology.serial(ndim=3)
    assert topo.grid == (1, 1, 1) and topo.coords == (0, 0, 0) and topo.nspatial == 1
    assert topo.spatial.Get_topo() == ([1, 1, 1], [False] * 3, [0, 0, 0])
    assert "grid 1x1x1" in repr(topo) and Topology.serial().grid == (1, 1)
    w = Window(3, 1, 1, 1)
    plan = plan_halo((4, 5, 3), w, Window(2, 2), w, (1, 1, 1), (0, 0, 0))
    ga = GlobalArray(plan, topo.spatial)
    x = np.random.RandomState(0).standard_normal((2, 3, 4, 5, 3))
    chunk = ga.exchange(x)
    padded = np.pad(x, ((0, 0), (0, 0)) + ((2, 2),) * 3)
    expect = padded[(Ellipsis,) + tuple(slice(a + 2, b + 2) for a, b in plan.chunk.spans)]
    np.testing.assert_array_equal(chunk, expect)
    with pytest.raises(ValueError, match=r"x_local must have shape \(B, C, 4, 5, 3\)"):
        ga.exchange(x[..., 0])
    with pytest.raises(ValueError, match="plan for a"):
        GlobalArray(plan, Topology.serial().spatial)
