"""Models sequence layers: fit, predict, error rates (no MPI of their own beyond gradient sums).

:class:`Model` is every image model and :class:`GB` adds neon's layer-wise pretraining. Experiment
files name them by neon's names, which the registry (:mod:`distnet.config.registry`) keeps as
aliases: ``MLP``, ``Convnet`` and ``ConvnetDist`` build a :class:`Model`, ``GBDist`` a :class:`GB`.
:class:`Autoencoder` is a :class:`Model` trained to reconstruct its input."""
from .autoencoder import Autoencoder
from .gb import GB
from .model import Model

__all__ = ["Autoencoder", "GB", "Model"]
