"""Layers: own parameters; the only place where ops (math) meet comm (halos, allreduce).

One class per layer kind: a layer distributes itself from its placement (:mod:`.placement`):
on a process grid of several tiles a window layer exchanges halos, an FC layer after a tiled
input holds its tile's weight columns, batch norm sums its statistics over the tiles; on one
tile the same class runs on whole images. neon's ``...Dist`` class names are YAML aliases
(:mod:`distnet.config.registry`).
"""
from .add import AddLayer
from .base import REPLICATED, SPATIAL, BaseLayer, LayerContext
from .concat import ConcatLayer
from .decoder import CropLayer, DeconvLayer, UpsampleLayer
from .fc import FullyConnectedLayer, FullyConnectedNoBiasLayer
from .lcn import LCNLayer
from .local import LocalFilteringLayer
from .pooling import AveragePoolingLayer, L2PoolingLayer, MaxPoolingLayer
from .tower_sum import TowerSumLayer
from .spatial import ConvLayer, WindowLayer

__all__ = ["AveragePoolingLayer", "BaseLayer", "ConvLayer", "FullyConnectedLayer",
           "FullyConnectedNoBiasLayer", "L2PoolingLayer", "LayerContext", "MaxPoolingLayer",
           "REPLICATED", "SPATIAL", "WindowLayer"]
__all__ += ["LCNLayer", "LocalFilteringLayer"]
__all__ += ["AddLayer", "ConcatLayer"]
__all__ += ["CropLayer", "DeconvLayer", "UpsampleLayer"]
__all__ += ["TowerSumLayer"]
