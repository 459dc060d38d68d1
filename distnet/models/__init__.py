"""Models sequence layers: fit, predict, error rates (no MPI of their own beyond gradient sums)."""
from .convnet import Convnet, ConvnetDist
from .gb import GB, GBDist
from .mlp import MLP

__all__ = ["GB", "GBDist", "MLP", "Convnet", "ConvnetDist"]
