"""``distnet plan``: another name of ``distnet show`` (the layer table and the cost model)."""
import click

from .show import show

plan = click.Command("plan", params=show.params, callback=show.callback,
                     help=f"{show.help}\n\nThe same command as `distnet show`.")
