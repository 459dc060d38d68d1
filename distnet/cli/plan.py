"""``distnet plan EXP.yaml -n N``: the cost model of :mod:`distnet.plan` as a command (register
it with ``main.add_command(plan)``)."""
import json
import sys

import click

from ..errors import DistnetError


def _shape(text):
    try:
        return tuple(int(v) for v in text.replace("x", ",").split(","))
    except ValueError:
        raise click.BadParameter(f"expected C,H,W (e.g. 3,256,256), got {text!r}") from None


@click.command("plan")
@click.argument("experiment", type=click.Path(exists=True, dir_okay=False))
@click.option("-n", "nranks", type=click.IntRange(min=1), default=1, show_default=True,
              help="Spatial ranks (any number; the grid is chosen as a run would).")
@click.option("--grid", default=None, metavar="PYxPX", help="Force the grid, e.g. 2x8.")
@click.option("--batch", type=click.IntRange(min=1), default=None,
              help="Minibatch size (default: the model's batch_size).")
@click.option("--input-shape", default=None, metavar="C,H,W",
              help="Image shape, when the dataset cannot tell it without its files.")
@click.option("--alpha", type=float, default=None, help="Seconds per message (default 2e-6).")
@click.option("--beta", type=float, default=None, help="Bytes/s per rank on the network (default 10e9).")
@click.option("--flops", "flop_rate", type=float, default=None,
              help="FLOP/s per rank for the GEMMs (default 50e9).")
@click.option("--mem-rate", type=float, default=None,
              help="Bytes/s per rank for memory-bound work (default 5e9).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help="As for run.")
def plan(experiment, nranks, grid, batch, input_shape, alpha, beta, flop_rate, mem_rate, as_json, overrides):
    """Predict, per layer and in total, what one training step of EXPERIMENT costs on N ranks:
    local tile shapes, halo and Allreduce bytes, FLOPs and activation memory per rank, and a
    step time from an alpha-beta network model (constants settable; see distnet.plan.Machine)."""
    from ..config import load_experiment
    from ..plan import Machine, format_plan, plan_model
    try:
        exp = load_experiment(experiment, overrides)
        if input_shape:
            shape = _shape(input_shape)
        else:
            try:
                shape = tuple(exp.dataset.image_shape)
            except DistnetError as e:
                raise click.UsageError(f"the dataset cannot tell its image shape ({e}); "
                                       f"give --input-shape C,H,W") from None
        machine = Machine(**{k: v for k, v in (("alpha", alpha), ("beta", beta), ("flop_rate", flop_rate),
                                               ("mem_rate", mem_rate)) if v is not None})
        g = tuple(int(v) for v in grid.lower().split("x")) if grid else None
        itemsize = exp.backend.dtype.itemsize
        p = plan_model(exp.model, shape, nranks, grid=g, batch=batch, itemsize=itemsize, machine=machine,
                       momentum=bool(exp.model.momentum(0)) if hasattr(exp.model, "momentum") else True)
        if nranks > 1 and not exp.dist_flag:
            p.notes.append("the experiment has dist_flag: False; figures are for its distributed "
                           "version (`distnet distribute`)")
    except (DistnetError, ValueError) as e:
        click.echo(f"distnet: error: {e}", err=True)
        sys.exit(2)
    if as_json:
        click.echo(json.dumps(p.to_dict(), indent=1, default=float))
    else:
        click.echo(format_plan(p))
