"""Layers: own parameters; the only place where ops (math) meet comm (halos, allreduce).

Non-dist classes work on whole images; each ``*Dist`` class derives from its non-dist parent and
changes only how the input is gathered and how weights are shared (see :mod:`.dist`).
"""
from .add import AddLayer
from .base import REPLICATED, SPATIAL, BaseLayer, LayerContext
from .dist import (AveragePoolingLayerDist, ConvLayerDist, L2PoolingLayerDist, LayerDist,
                   LayerWithNoBiasDist, MaxPoolingLayerDist)
from .concat import ConcatLayer
from .fc import Layer, LayerWithNoBias
from .lcn import LCNLayer, LCNLayerDist
from .local import LocalFilteringLayer, LocalFilteringLayerDist
from .tower_sum import TowerSumLayer
from .spatial import AveragePoolingLayer, ConvLayer, L2PoolingLayer, MaxPoolingLayer, WindowLayer

__all__ = ["AveragePoolingLayer", "AveragePoolingLayerDist", "BaseLayer", "ConvLayer", "ConvLayerDist",
           "L2PoolingLayer", "L2PoolingLayerDist", "Layer", "LayerContext", "LayerDist",
           "LayerWithNoBias", "LayerWithNoBiasDist", "MaxPoolingLayer", "MaxPoolingLayerDist",
           "REPLICATED", "SPATIAL", "WindowLayer"]
__all__ += ["LCNLayer", "LCNLayerDist", "LocalFilteringLayer", "LocalFilteringLayerDist"]
__all__ += ["AddLayer", "ConcatLayer"]
__all__ += ["TowerSumLayer"]
