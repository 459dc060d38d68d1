"""How a model's forward and backward run: one object per model shape, chosen once when the
model is configured (:meth:`~distnet.models.model.Model.configure`).

* :class:`ChainExecution`: the layers in list order (no layer names its inputs);
* :class:`GraphExecution`: a graph of layers (residual additions, concatenations, tower
  networks), :mod:`distnet.models.graph`;
* :class:`~distnet.models.pipeline.Pipeline`: pipeline stages and/or GPipe micro-batches.

All three answer the same calls: ``forward(x)`` (inference: the output ``(b, K)``, replicated;
a per-pixel model's tile of its maps),
``forward_backward(x, t, batch_size, lowest, after_layer)`` (one training pass: the summed
loss as a ``(1,)`` float64 array, gradients left in the parameters) and, for the first two,
``backward(delta, lowest)``.
"""
from ..layers.step import backward, cost_delta, forward, forward_backward


class ChainExecution:
    """``layers`` run in order; ``cost`` is the model's cost (a per-pixel one bound to its
    communicator: :func:`~distnet.layers.pixel_cost.bind_cost`)."""

    def __init__(self, layers, cost):
        self.layers, self.cost = layers, cost

    def forward(self, x):
        return forward(self.layers, x)

    def backward(self, delta, lowest=0):
        backward(self.layers, delta, lowest)

    def forward_backward(self, x, t, batch_size, lowest=0, after_layer=None):
        """The summed loss of ``x``'s rows (the loss stays on the device until the step's end)."""
        return forward_backward(self.layers, self.cost, x, t, batch_size, lowest, after_layer)


class GraphExecution:
    """The layers of ``graph`` (:class:`~distnet.models.graph.Graph`) run in model order."""

    def __init__(self, graph, cost):
        self.graph, self.cost = graph, cost

    def forward(self, x):
        return self.graph.forward(x)

    def backward(self, delta, lowest=0):
        self.graph.backward(delta, lowest)

    def forward_backward(self, x, t, batch_size, lowest=0, after_layer=None):
        loss, delta = cost_delta(self.cost, self.graph.forward(x), t, batch_size)
        self.graph.backward(delta, lowest, after_layer)
        return loss
