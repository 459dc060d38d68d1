"""``distnet show EXP.yaml -n N`` (alias ``distnet plan``): how an experiment is cut over N ranks
and what one training step costs there, from geometry alone (no MPI, no data). The layer table
comes from :mod:`distnet.experiments.report`, the cost model from :mod:`distnet.plan`; both read
the layers' placements on the layout ``distnet run`` would use."""
import json

import click

from ..errors import DistnetError
from .job import Job
from .options import finite_number


def _shape(text):
    try:
        shape = tuple(int(v) for v in text.replace("x", ",").split(","))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise click.BadParameter(f"expected C,H,W or C,D,H,W of positive sizes (e.g. 3,256,256 or "
                                 f"1,512,512,512), got {text!r}",
                                 param_hint="'--input-shape'")
    return shape


#: A cost-model constant: finite and > 0 (``--alpha``: >= 0).
_RATE = click.FloatRange(min=0, min_open=True)


@click.command("show")
@click.argument("experiment", type=click.Path(exists=True, dir_okay=False))
@click.option("-n", "nranks", type=click.IntRange(min=1), default=1, show_default=True,
              help="Number of ranks (world size), cut as `distnet run` would cut it.")
@click.option("--grid", default=None, metavar="[PZx]PYxPX",
              help="Force the spatial grid, e.g. 2x8 (images) or 4x4x4 (volumes).")
@click.option("--batch", type=click.IntRange(min=1), default=None,
              help="Minibatch size for the cost model (default: the model's batch_size).")
@click.option("--input-shape", default=None, metavar="C,[D,]H,W",
              help="Image shape C,H,W or volume shape C,D,H,W, when the dataset cannot tell it without "
                   "its files (or to plan another size).")
@click.option("--ranks-per-node", type=click.IntRange(min=1), default=None,
              help="Ranks on one node (ranks k*R ... k*R+R-1 share node k). Default: the launcher's "
                   "count under mpiexec/srun, else all N on one node.")
@click.option("--alpha", type=click.FloatRange(min=0), callback=finite_number, default=None,
              help="Seconds per message inside a node (default 1e-6).")
@click.option("--beta", type=_RATE, callback=finite_number, default=None,
              help="Bytes/s per rank inside a node (default 10e9).")
@click.option("--alpha-inter", type=click.FloatRange(min=0), callback=finite_number, default=None,
              help="Seconds per message between nodes (default 5e-6).")
@click.option("--beta-inter", type=_RATE, callback=finite_number, default=None,
              help="Bytes/s of one node's network interface, shared by its ranks (default 12.5e9).")
@click.option("--flops", "flop_rate", type=_RATE, callback=finite_number, default=None,
              help="FLOP/s per rank for the GEMMs (default 50e9).")
@click.option("--mem-rate", type=_RATE, callback=finite_number, default=None,
              help="Bytes/s per rank for memory-bound work (default 5e9).")
@click.option("--machine", "machine_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A machine file (JSON: the constants above, cores, measured rates; --save-machine "
                   "writes one); the options above override it.")
@click.option("--calibrate", is_flag=True,
              help="Measure this machine's rates for this experiment's layers first (a few training "
                   "steps of it on a reduced input, one thread) and its cores; plan with them.")
@click.option("--save-machine", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the machine the plan used (after --calibrate: the measured one) to this file.")
@click.option("--json", "as_json", is_flag=True, help="Print the cost model as JSON.")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help="As for run.")
def show(experiment, nranks, grid, batch, input_shape, ranks_per_node, alpha, beta, alpha_inter, beta_inter,
         flop_rate, mem_rate, machine_file, calibrate, save_machine, as_json, overrides):
    """Show how EXPERIMENT is cut over N ranks (data replicas x pipeline stages x spatial grid,
    as `distnet run` cuts it) and what one training step costs there, from geometry alone: per
    layer the global and local shapes (rank 0 and the largest tile), the halo widths, the
    parameters (total and per rank) and the activation memory per rank; then the cost model:
    halo and Allreduce bytes, FLOPs and a step time from an alpha-beta network model
    (constants settable; see distnet.plan.Machine)."""
    from ..config import load_experiment
    from ..experiments.report import format_show
    from ..log import job_rank
    from ..plan import format_plan, plan_model
    from ..plan.memory import memory_totals
    # under mpiexec: one report (rank 0's) instead of one per rank; errors come from every rank
    say = click.echo if job_rank() == 0 else (lambda *args, **kwargs: None)
    with Job():
        exp = load_experiment(experiment, overrides)
        from ..experiments.seq2seq import Seq2SeqExperiment   # not a chain of layers
        if isinstance(exp, Seq2SeqExperiment):
            say("\n".join(exp.show_lines(nranks)))
            return
        if grid and not exp.dist_flag:
            raise click.UsageError("--grid is for experiments with dist_flag: True (this one runs on "
                                   "one process, or on data replicas of whole images)")
        if grid:
            try:
                exp.grid = tuple(int(v) for v in grid.lower().split("x"))
            except ValueError:
                raise click.BadParameter(f"expected PYxPX or PZxPYxPX (e.g. 2x8, 4x4x4), got {grid!r}") from None
        if input_shape:
            shape = _shape(input_shape)
        else:
            try:
                shape = tuple(exp.dataset.image_shape)
            except DistnetError as e:
                raise click.UsageError(f"the dataset cannot tell its image shape ({e}); "
                                       f"give --input-shape C,H,W (or C,D,H,W)") from None
        layout = exp.layout(nranks, shape)
        machine = machine_of(machine_file, calibrate and (experiment, overrides, shape, batch),
                             ranks_per_node=ranks_per_node, alpha=alpha, beta=beta, alpha_inter=alpha_inter,
                             beta_inter=beta_inter, flop_rate=flop_rate, mem_rate=mem_rate)
        if save_machine:   # the node's size stays the launcher's, not this plan's default
            with open(save_machine, "w") as f:
                f.write(machine.to_json() + "\n")
        machine.ranks_per_node = machine.ranks_per_node or default_ranks_per_node(nranks)
        p = plan_model(exp.model, shape, layout.nspatial, grid=layout.grid, batch=batch,
                       itemsize=exp.backend.dtype.itemsize, machine=machine,
                       state_arrays=len(exp.model.optimizer_state_names()), data=layout.data, pipe=layout.pipe)
        if ranks_per_node is None and machine.ranks_per_node == nranks and nranks > 1:
            p.notes.append(f"all {nranks} ranks are taken to share one node (no launcher says otherwise): "
                           "give --ranks-per-node R for a job across nodes")
        # the data set's own figures describe its own images: not those of --input-shape
        own = not input_shape
        text = None if as_json else format_show(exp, experiment, nranks, layout, shape, data_line=own)
        data_bytes = data_memory_of(exp, layout, batch) if own else None
    if as_json:
        d = p.to_dict()
        d["memory"] = memory_totals(p, data_bytes)
        say(json.dumps(d, indent=1, default=float))
    else:
        say(text)
        say(format_plan(p, data_bytes))


def machine_of(path, calibration, **overrides):
    """The plan's :class:`~distnet.plan.Machine`: the defaults, or a machine file (``path``), or
    the rates ``calibration`` measures (``(experiment file, --set overrides, input shape,
    batch)``: :func:`distnet.plan.calibrate.measure` on a fresh copy of the experiment; the
    file's constants kept), then the options given (``overrides``, None: not given)."""
    from ..plan import Machine
    from ..plan.calibrate import measure
    machine = Machine.load(path) if path else Machine()
    if calibration:
        from ..config import load_experiment
        experiment, sets, shape, batch = calibration
        measured = measure(load_experiment(experiment, sets), shape, batch)
        machine.cores, machine.rates, machine.runtime_bytes = measured.cores, measured.rates, measured.runtime_bytes
    for k, v in overrides.items():
        if v is not None:
            setattr(machine, k, v)
    return machine


def default_ranks_per_node(nranks, env=None):
    """Ranks per node when ``--ranks-per-node`` is not given: the launcher's node-local count
    under mpiexec / srun, else all ``nranks`` on one node (the plan then says so)."""
    import os

    from ..comm.launcher import LOCAL_SIZE_VARS
    env = os.environ if env is None else env
    local = next((int(env[k]) for k in LOCAL_SIZE_VARS if str(env.get(k, "")).isdigit()), 0)
    return local or nranks


def data_memory_of(exp, layout, batch):
    """Bytes of data the rank holding most keeps (in memory or streamed, as ``in_memory``
    picks), from the data set's files; None when it cannot tell (MNIST, CIFAR-10)."""
    import numpy as np
    tile = exp.dataset.rank_tile(layout.grid, (0,) * len(layout.grid)) if exp.dist_flag else None
    try:
        m = exp.dataset.memory_per_rank(tile=tile, batch_size=batch or exp.model.batch_size,
                                        ndata=layout.data, dtype=np.dtype(exp.backend.dtype))
    except (DistnetError, OSError):
        return None
    return None if m is None else m[m["mode"] if m.get("mode") in ("memory", "stream") else "memory"]
