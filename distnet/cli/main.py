"""The ``distnet`` command line (thin: every command calls into the package). This module only
assembles the click group; each command lives in its own module, and the MPI job handling they
share in :mod:`.job`."""
import warnings

import click

from .check import check
from .checkpoint import checkpoint
from .compare import compare_command
from .data import data
from .distribute import distribute
from .evaluate import evaluate, predict
from .info import info
from .job import one_line_warning
from .plan import plan
from .plot import plot
from .run import run
from .runs import runs
from .show import show


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.version_option(package_name="distnet")
@click.pass_context
def main(ctx):
    """Train neon-style YAML experiments on one process or across MPI ranks."""
    # One-line warnings while a command runs, and the host's format back when it returns: a
    # program or test that calls the command (click's standalone_mode=False, CliRunner) keeps
    # its own warnings.formatwarning.
    previous = warnings.formatwarning
    warnings.formatwarning = one_line_warning
    ctx.call_on_close(lambda: setattr(warnings, "formatwarning", previous))
    if ctx.invoked_subcommand is None:  # bare `distnet`: the help, and success
        click.echo(ctx.get_help())
        ctx.exit(0)


for _command in (run, check, info, data, evaluate, predict, distribute, compare_command, plot, show, plan, runs,
                 checkpoint):
    main.add_command(_command)


if __name__ == "__main__":
    main()
