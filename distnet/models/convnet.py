"""``Convnet`` and ``ConvnetDist``: the CNN models. They are :class:`~distnet.models.mlp.MLP`
(neon ran CNNs through MLP) with any sequence of window layers followed by fully connected
layers; ``ConvnetDist`` is the name neon's dist examples use. What is distributed is decided by
the layers (``*Dist`` classes), so the model adds nothing but its name: unlike neon's
ConvnetDist there is no hard-wired layer pattern and no rank-0 special path."""
from .mlp import MLP


class Convnet(MLP):
    """A convolutional network (see :class:`MLP` for the keys)."""


class ConvnetDist(Convnet):
    """neon's ``ConvnetDist``: the model of a spatially distributed CNN experiment."""
