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
        raise click.BadParameter(f"expected C,H,W of positive sizes (e.g. 3,256,256), got {text!r}",
                                 param_hint="'--input-shape'")
    return shape


#: A cost-model constant: finite and > 0 (``--alpha``: >= 0).
_RATE = click.FloatRange(min=0, min_open=True)


@click.command("show")
@click.argument("experiment", type=click.Path(exists=True, dir_okay=False))
@click.option("-n", "nranks", type=click.IntRange(min=1), default=1, show_default=True,
              help="Number of ranks (world size), cut as `distnet run` would cut it.")
@click.option("--grid", default=None, metavar="PYxPX", help="Force the spatial grid, e.g. 2x8.")
@click.option("--batch", type=click.IntRange(min=1), default=None,
              help="Minibatch size for the cost model (default: the model's batch_size).")
@click.option("--input-shape", default=None, metavar="C,H,W",
              help="Image shape, when the dataset cannot tell it without its files.")
@click.option("--alpha", type=click.FloatRange(min=0), callback=finite_number, default=None,
              help="Seconds per message (default 2e-6).")
@click.option("--beta", type=_RATE, callback=finite_number, default=None,
              help="Bytes/s per rank on the network (default 10e9).")
@click.option("--flops", "flop_rate", type=_RATE, callback=finite_number, default=None,
              help="FLOP/s per rank for the GEMMs (default 50e9).")
@click.option("--mem-rate", type=_RATE, callback=finite_number, default=None,
              help="Bytes/s per rank for memory-bound work (default 5e9).")
@click.option("--json", "as_json", is_flag=True, help="Print the cost model as JSON.")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help="As for run.")
def show(experiment, nranks, grid, batch, input_shape, alpha, beta, flop_rate, mem_rate, as_json, overrides):
    """Show how EXPERIMENT is cut over N ranks (data replicas x pipeline stages x spatial grid,
    as `distnet run` cuts it) and what one training step costs there, from geometry alone: per
    layer the global and local shapes (rank 0 and the largest tile), the halo widths, the
    parameters (total and per rank) and the activation memory per rank; then the cost model:
    halo and Allreduce bytes, FLOPs and a step time from an alpha-beta network model
    (constants settable; see distnet.plan.Machine)."""
    from ..config import load_experiment
    from ..experiments.report import format_show
    from ..log import job_rank
    from ..plan import Machine, format_plan, plan_model
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
                raise click.BadParameter(f"expected PYxPX (e.g. 2x8), got {grid!r}") from None
        if input_shape:
            shape = _shape(input_shape)
        else:
            try:
                shape = tuple(exp.dataset.image_shape)
            except DistnetError as e:
                raise click.UsageError(f"the dataset cannot tell its image shape ({e}); "
                                       f"give --input-shape C,H,W") from None
        layout = exp.layout(nranks, shape)
        machine = Machine(**{k: v for k, v in (("alpha", alpha), ("beta", beta), ("flop_rate", flop_rate),
                                               ("mem_rate", mem_rate)) if v is not None})
        p = plan_model(exp.model, shape, layout.nspatial, grid=layout.grid, batch=batch,
                       itemsize=exp.backend.dtype.itemsize, machine=machine,
                       state_arrays=len(exp.model.optimizer_state_names()), data=layout.data, pipe=layout.pipe)
        text = None if as_json else format_show(exp, experiment, nranks, layout, shape)
    if as_json:
        say(json.dumps(p.to_dict(), indent=1, default=float))
    else:
        say(text)
        say(format_plan(p))
