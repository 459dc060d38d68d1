"""Models sequence layers: fit, predict, error rates (no MPI of their own beyond gradient sums).

:class:`Model` is every image model; ``MLP``, ``Convnet`` and ``ConvnetDist`` are neon's names
for it (experiment files use them), and ``GBDist`` is neon's name for :class:`GB`."""
from .gb import GB, GBDist
from .model import Model

MLP = Convnet = ConvnetDist = Model

__all__ = ["GB", "GBDist", "Model", "MLP", "Convnet", "ConvnetDist"]
