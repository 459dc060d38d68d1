"""Layer graphs: a model whose layers name their inputs (residual additions, concatenations,
branches), run in the order they are listed.

A layer's ``inputs`` key lists the names of the layers whose outputs it reads (``input``: the
model's input). Without the key a layer reads the previous layer's output (the model's input for
the first layer): a model where no layer has ``inputs`` is a chain and runs exactly as before.
The list order is the execution order, so a layer may only name layers listed before it (which
also rules out cycles); every layer but the last must be read by some layer (the last layer's
output is the model's output).

Forward keeps each output until its last reader has run; backward runs the layers in reverse
order and gives every layer the SUM of its readers' input gradients (a fork: a residual block's
input feeds the block and its shortcut). Additions and concatenations of tiled activations are
local (every input has the same tiles); a window layer on a branch exchanges its own halos
(each layer has its own chunk exchange), so the distribution rules are the chain's.

Tower networks (:mod:`distnet.models.towers`): layers with a ``tower`` key; a rank runs only
the shared layers and its own towers' (:meth:`Graph.set_towers`), a TowerSumLayer reads only
its rank's towers' inputs, and the gradient of a shared value read by tower layers is summed
over the tower ranks in the backward (the part from tower readers; the part from shared readers
is complete on every rank).

Single-input layers keep their protocol (``infer_shape(shape)``, ``place(layout, position)``,
``fprop(x)``, ``bprop(delta) -> dx``); layers with ``multi_input`` take lists.
"""
from ..config.builder import config_name, config_where
from ..errors import ConfigError

#: The name of the model's input in ``inputs`` lists.
INPUT = "input"


def _unique_names(layers):
    """``{name: index}`` of the layers; ConfigError (at the second layer's ``name``, naming the
    first one's line) if two share a name, in chains too: checkpoints, the logs and plans,
    pretraining records and ``inputs`` lists name layers by it, and two layers of one name
    would make each of them ambiguous."""
    index = {}
    for i, layer in enumerate(layers):
        j = index.setdefault(layer.name, i)
        if j != i:
            first = config_where(layers[j], "name")
            what = f"layer {j}" + (f" ({first})" if first else "")
            raise layers[i].error(f"the name '{layer.name}' is also the name of {what}; layer names must "
                                  "be unique (checkpoints, logs and inputs lists name layers by it)", "name")
    return index


class Graph:
    """The resolved graph of a model's ``layers``: ``sources[i]``, the indices of layer ``i``'s
    inputs (``-1``: the model's input), ``readers[j]``, the layers reading layer ``j``, and
    ``last_use[j]``, the index of the last of them (-1 for the model's input). ``is_chain``: no
    layer names its inputs (the plain chain code runs). Errors point at the offending layer's
    YAML (file:line of the ``inputs`` key)."""

    def __init__(self, layers):
        self.layers = layers
        self.is_chain = all(layer.inputs is None and layer.tower is None for layer in layers)
        index = _unique_names(layers)
        if self.is_chain:
            self.sources = [[i - 1] for i in range(len(layers))]
            self.readers = {j: [j + 1] for j in range(-1, len(layers) - 1)}
            self.readers[len(layers) - 1] = []
            self.last_use = {j: j + 1 for j in range(-1, len(layers))}
            return
        for layer in layers:
            if layer.name == INPUT:
                raise layer.error(f"'{INPUT}' names the model's input in inputs lists; rename the layer", "name")
        self.sources = []
        for i, layer in enumerate(layers):
            if layer.inputs is None:
                src = [i - 1]
            else:
                if not layer.inputs:
                    raise layer.error("inputs is empty; name at least one layer (or 'input')", "inputs")
                src = []
                for name in layer.inputs:
                    if name == INPUT:
                        src.append(-1)
                        continue
                    j = index.get(name)
                    if j is None:
                        raise layer.error(f"inputs names '{name}', which is no layer of the model "
                                          f"(known: {', '.join([INPUT] + list(index))})", "inputs")
                    if j >= i:
                        what = "itself" if j == i else f"layer '{name}', listed after it (item {j})"
                        raise layer.error(f"inputs names {what}: layers run in the order they are listed, "
                                          "so a layer may only read layers listed before it (no cycles)",
                                          "inputs")
                    src.append(j)
            if len(src) > 1 and not layer.multi_input:
                raise layer.error(f"{config_name(layer)} reads one input but inputs names {len(src)}; "
                                  "combine them first with an AddLayer or a ConcatLayer", "inputs")
            self.sources.append(src)
        self.readers = {j: [] for j in range(-1, len(layers))}
        for i, src in enumerate(self.sources):
            for j in src:
                if i not in self.readers[j]:
                    self.readers[j].append(i)
        for j, layer in enumerate(layers[:-1]):
            if not self.readers[j]:
                raise layer.error("its output is read by no layer (only the last layer's output is the "
                                  "model's output); name it in a later layer's inputs or remove it")
        if not self.readers[-1]:
            raise ConfigError("no layer reads the model's input ('input')", None, "layers")
        self.last_use = {j: max(r) if r else len(layers) for j, r in self.readers.items()}

    #: Tower networks (:meth:`set_towers`): every layer's tower (None: shared), the layers
    #: this rank runs (None: all), the shared layers read by towers and the backward exchange.
    tower_of = local = None
    exchanged = ()
    exchange = None

    def set_towers(self, tower_of, local, exchanged, exchange):
        """Run only the layers ``local`` (indices) on this rank; ``exchange(j, part, rows)``
        sums the tower readers' part of layer ``j``'s output gradient over the tower ranks, for
        ``j`` in ``exchanged`` (:meth:`~distnet.models.towers.TowerPlan.exchange`)."""
        self.tower_of, self.local = list(tower_of), set(local)
        self.exchanged, self.exchange = set(exchanged), exchange
        self.last_use = {j: max([r for r in rs if r in self.local], default=len(self.layers))
                         for j, rs in self.readers.items()}

    def sources_here(self, i):
        """The inputs of layer ``i`` on this rank: a TowerSumLayer reads its rank's towers only."""
        src = self.sources[i]
        if self.local is None or not self.layers[i].tower_sum:
            return src
        return [j for j in src if j in self.local]

    def inputs_of(self, i, values, model_input, here=False):
        """The values layer ``i`` reads, from ``values`` (dict index -> value) and the model's
        input: one value, or a list for a ``multi_input`` layer (``here``: only those this rank
        holds, :meth:`sources_here`)."""
        src = self.sources_here(i) if here else self.sources[i]
        got = [model_input if j < 0 else values[j] for j in src]
        return got if self.layers[i].multi_input else got[0]

    def infer_shapes(self, input_shape):
        """Every layer's global output shape (list), each layer's ``infer_shape`` given its
        inputs' shapes."""
        shapes = []
        for i, layer in enumerate(self.layers):
            shapes.append(layer.infer_shape(self.inputs_of(i, shapes, tuple(input_shape))))
        return shapes

    def layouts(self, input_layout, place):
        """Walk the graph with ``place(i, layer, in_layout) -> out layout kind``; returns the
        output layout kind of every layer."""
        kinds = []
        for i, layer in enumerate(self.layers):
            kinds.append(place(i, layer, self.inputs_of(i, kinds, input_layout)))
        return kinds

    def forward(self, x, layers=None):
        """``x`` through the graph; outputs are dropped after their last reader. Returns the
        last layer's output."""
        values = {}
        for i, layer in enumerate(self.layers):
            if self.local is not None and i not in self.local:
                continue
            values[i] = layer.fprop(self.inputs_of(i, values, x, here=True))
            for j in set(self.sources_here(i)):   # a layer may read one value twice
                if j >= 0 and self.last_use[j] == i:
                    del values[j]
        return values[len(self.layers) - 1]

    def backward(self, delta, lowest=0, after_layer=None):
        """Backpropagate ``delta`` (the gradient of the last layer's output) down to layer
        ``lowest`` (layers below it neither learn nor need gradients). A layer's output gradient
        is the sum of its readers' input gradients (summed from the last reader down, the same
        order on every rank and grid). Every layer from ``lowest`` up fills its parameters'
        gradients, then ``after_layer(layer)`` runs (optional; the overlap hook of
        :func:`distnet.layers.step.backward`). Tower networks: module docstring (the exchanges
        are collective over ``Topology.pipe``, in the same order on every rank)."""
        grads = {len(self.layers) - 1: delta}
        from_towers = {}   # shared layer -> the sum of its tower readers' gradients here
        for i in range(len(self.layers) - 1, lowest - 1, -1):
            if self.local is not None and i not in self.local:
                continue
            layer, src = self.layers[i], self.sources_here(i)
            g = grads.pop(i, None)
            if i in self.exchanged:
                part = self.exchange(i, from_towers.pop(i, None), delta.shape[0])
                g = part if g is None else g + part
            to = from_towers if self.tower_of is not None and self.tower_of[i] is not None else grads
            need = [j >= lowest for j in src]
            dx = layer.bprop(g, need_input_grad=any(need))
            if after_layer is not None:
                after_layer(layer)
            if not any(need):
                continue
            dxs = dx if layer.multi_input else [dx]
            for j, d, n in zip(src, dxs, need):
                if n:
                    acc = to if j in self.exchanged else grads
                    acc[j] = d if j not in acc else acc[j] + d
        return None
