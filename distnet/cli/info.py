"""``distnet info``: the software stack, for bug reports (gathered by
:mod:`distnet.experiments.stack` from the modules that own each fact)."""
from ..experiments.stack import stack_info

__all__ = ["stack_info"]
