"""neon's ``LocalFilteringLayer`` (locally connected, untied filters), its decoder and its sparse
autoencoder pretraining step (docs/neon-semantics.md#local-filtering,
docs/neon-semantics.md#local-defiltering, docs/neon-semantics.md#gb-pretraining,
docs/neon-semantics.md#dist-layers).

Weights ``W (K, ho, wo, F)`` hold the filters of this rank's output tile, F = C*fh*fw in
``(c, u, v)`` order; neon's global ``(K*Ho*Wo, F)`` array reshaped to ``(K, Ho, Wo, F)`` and sliced
``[:, y0:y1, x0:x1, :]`` (the output tile; the whole plane on one process). Every filter is
independent, so on a process grid the layer needs no weight communication at all; its
gradient is complete on this rank (``OVER_DATA``: only data replicas would sum it). Every update is followed by the row
normalisation N (unit L2 norm per filter).

The pretraining step is written once for both layers: it only uses the seam of
:class:`~distnet.layers.spatial.WindowLayer` (``_chunk``: tile -> chunk, zero padding on one
process, halo exchange on a grid of several tiles; ``_input_grad``: its adjoint). So the
distributed step is the one-process one with the padding maps swapped for the exchanges, and
gives the same numbers.
"""
from dataclasses import replace

import numpy as np

from ..config.types import WEIGHT_INIT, NonNegative, PositiveInt
from ..ops.local import local_bprop, local_debprop, local_defprop, local_fprop, normalize_rows
from ..optim.optimizer import Optimizer
from ..optim.rates import LearningRates
from .params import Param, check_finite, check_weight_init, gen_weights, gen_weights_part
from .placement import OVER_DATA, ParamPlacement
from .spatial import WindowLayer
from .step import TrainingStep


class LocalDeFilteringLayer:
    """The decoder of a LocalFilteringLayer (built by ``pretrain_mode``; not a YAML class).

    ``V (K, ho, wo, F)`` has W's shape and slice: with tied weights it **is** ``W`` (same
    storage), otherwise it is a copy of ``W`` taken when pretraining starts. Its forward is the
    adjoint of the encoder (docs/neon-semantics.md#local-defiltering); it trains at the encoder's
    ``pretrain_learning_rate`` (the pretraining's :class:`~distnet.optim.rates.LearningRates`).
    Works on chunks; no communication.
    """

    def __init__(self, V, fshape, stride, name, w_placement):
        self.V, self.fshape, self.stride = V, fshape, stride
        # V is laid out as W: W's placement under V's name
        self.param = Param(replace(w_placement, name=f"{name}.V"), V, None)
        self.name = f"{name}.decoder"

    def fprop(self, h, chunk_shape):
        """``h (B, K, ho, wo)`` -> this rank's contributions ``(B, C, Hc, Wc)`` to the
        reconstruction of its chunk (ghost parts belong to other ranks' tiles)."""
        return local_defprop(h, self.V, chunk_shape, self.fshape, self.stride)

    def bprop(self, h, eps_chunk):
        """``eps_chunk = dJ/dxhat`` on the chunk -> ``dJ/dh (B, K, ho, wo)``; sets ``param.grad``
        (``(K, ho, wo, F)``, a batch sum)."""
        gh, self.param.grad = local_debprop(h, self.V, eps_chunk, self.fshape, self.stride)
        return gh

    def after_update(self):
        """``V <- N(V)`` after the training step's ``V <- V - lr * G_V``."""
        normalize_rows(self.V)


class LocalFilteringLayer(WindowLayer):
    """Locally connected layer: ``y[b,k,i,j] = sum_f W[k,i,j,f] * patch(x)[b,i,j,f]``, no bias,
    no activation; output ``(B, K, ho, wo)`` on the output tile.

    Keys: ``nofm`` (K), ``fshape``, ``stride``, ``padding`` (distnet addition), ``weight_init``,
    ``learning_rate``, ``nifm``/``ifmshape`` (optional, checked), and neon's pretraining keys:
    ``pretraining`` (bool, default False: GB pretrains the LF layers that set it),
    ``pretrain_learning_rate``, ``sparsity`` (lambda; both required when ``pretraining``),
    ``tied_weights`` (bool, default True: the decoder shares W's storage).
    """

    config_types = {"nofm": PositiveInt, "weight_init": WEIGHT_INIT, "learning_rate": NonNegative, "pretraining": bool,
                    "pretrain_learning_rate": NonNegative, "sparsity": NonNegative, "tied_weights": bool}
    spatial_axes = (2,)

    def __init__(self, nofm, fshape, weight_init, learning_rate=None, stride=1, padding=0,
                 pretraining=False, pretrain_learning_rate=None, sparsity=None, tied_weights=True,
                 nifm=None, ifmshape=None, **common):
        super().__init__(fshape, stride, padding, nifm, ifmshape, **common)
        self.nofm = nofm
        self.weight_init = check_weight_init(weight_init)
        self.learning_rate = learning_rate
        self.pretraining = pretraining
        self.pretrain_learning_rate = pretrain_learning_rate
        self.sparsity = sparsity
        self.tied_weights = tied_weights
        if pretraining:
            for key in ("pretrain_learning_rate", "sparsity"):
                if getattr(self, key) is None:
                    raise self.error(f"pretraining is True but {key} is not given", key)
        self.W = self.decoder = self.pooling = self.pretrain_optimizer = None
        self._fresh = False

    def out_channels(self, nifm):
        return self.nofm

    # -- weights -------------------------------------------------------------------------------
    def place_params(self, plan, position):
        """``W (K, Ho, Wo, F)``: the filters of my output tile (sharded on a grid; complete on
        this rank for its samples: only data replicas sum the gradient)."""
        C, (fh, fw) = self.in_shape[0], self.fshape
        K, Ho, Wo = self.out_shape
        t = plan.out_tile
        F = C * fh * fw
        index = (slice(None), slice(t.y0, t.y1), slice(t.x0, t.x1), slice(None))
        return (ParamPlacement(f"{self.name}.W", (K, Ho, Wo, F), (K, t.y1 - t.y0, t.x1 - t.x0, F),
                               index, OVER_DATA, tuple(position.grid) != (1, 1)),)

    def macs(self, plan):
        return self.nofm * self.in_shape[0] * self.fshape[0] * self.fshape[1] * plan.out_tile.size

    def draw_params(self, rng):
        """neon's global ``(K*Ho*Wo, F)`` array with normalised rows, as ``(K, Ho, Wo, F)`` (every
        rank draws the same global array and keeps its output tile's filters)."""
        C, (fh, fw) = self.in_shape[0], self.fshape
        K, Ho, Wo = self.out_shape
        w = gen_weights(rng, (K * Ho * Wo, C * fh * fw), self.weight_init, self.dtype)
        return [normalize_rows(w.reshape(K, Ho, Wo, C * fh * fw))]

    def draw_local_params(self, rng):
        """My output tile's rows of :meth:`draw_params`'s array, drawn without the global one
        (:func:`~distnet.layers.params.gen_weights_part`); every drawn piece is normalised for
        the check, so every rank refuses a zero row (NaN) alike."""
        C, (fh, fw) = self.in_shape[0], self.fshape
        K, Ho, Wo = self.out_shape
        F = C * fh * fw
        index = self.placement.params[0].index
        ys, xs = (slice(0, Ho), slice(0, Wo)) if index is Ellipsis else (index[1], index[2])
        k, y, x = np.meshgrid(np.arange(K), np.arange(Ho)[ys], np.arange(Wo)[xs], indexing="ij")
        rows = np.ravel_multi_index((k.ravel(), y.ravel(), x.ravel()), (K, Ho, Wo))

        def check(v, c0):
            check_finite(normalize_rows(v.copy()) if v.shape[1] == F else v)
        w = gen_weights_part(rng, (K * Ho * Wo, F), self.weight_init, self.dtype, rows=rows, check=check)
        return [normalize_rows(w.reshape(K, y.shape[1], y.shape[2], F))]

    def params_ready(self):
        self.W = self._params[0].value

    def after_update(self):
        """Renormalise the rows of W if it was just updated (a layer left out of an update, e.g.
        below the top layer in GB's first epochs, is not touched)."""
        if self._fresh:
            normalize_rows(self.W)
            self._fresh = False

    # -- supervised forward / backward ------------------------------------------------------------
    def fprop(self, x):
        """``x (B, C, h, w)`` on my input tile -> ``(B, K, ho, wo)`` on my output tile."""
        self._xc = self._chunk(x)
        return local_fprop(self._xc, self.W, self.fshape, self.stride)

    def bprop(self, delta, need_input_grad=True):
        """``delta (B, K, ho, wo)`` -> gradient on my input tile (or None); sets ``W``'s grad."""
        dxc, dw = local_bprop(self._xc, self.W, delta, self.fshape, self.stride, need_dx=need_input_grad)
        self._params[0].grad[...] = dw
        self._fresh = True
        return self._input_grad(dxc) if need_input_grad else None

    # -- pretraining ------------------------------------------------------------------------------
    def pretrain_rates(self):
        """The learning rates of this layer's pretraining: its ``pretrain_learning_rate``, for the
        encoder and the decoder (:class:`~distnet.optim.rates.LearningRates`)."""
        return LearningRates(phase_rate=self.pretrain_learning_rate, phase="pretrain_learning_rate")

    def pretrain_mode(self, pooling):
        """Start pretraining with ``pooling`` (the next layer, any pooling layer) as the sparsity
        pool: build the decoder (tied: V is W) and the pretraining's optimizer (plain SGD at
        :meth:`pretrain_rates`; the supervised training keeps its own)."""
        self.pooling = pooling
        V = self.W if self.tied_weights else self.W.copy()
        self.decoder = LocalDeFilteringLayer(V, self.fshape, self.stride, self.name, self.placement.params[0])
        self.pretrain_optimizer = Optimizer.plain(self.pretrain_rates())

    def pretrain_step(self, x, batch_size=None, step=None):
        """One sparse-autoencoder step on ``x (B, C, h, w)`` (my input tile;
        docs/neon-semantics.md#gb-pretraining).

        J = (1/b) [1/2 ||xhat - x||^2 + lambda * sum(pool(h))], h = LF_W(x), xhat = DeF_V(h)
        cropped to the image; the decoder gradient and the encoder gradient are both taken at
        the pre-step weights, then V <- N(V - lr G_V) and W <- N(W - lr G_W) (in that order, so
        with tied weights W <- N(N(W - lr G_V) - lr G_W)).

        Distributed: my reconstruction contributions over my chunk are summed into their owners'
        tiles (adjoint exchange), so every rank holds the complete xhat on its tile; the error
        on the tile is exchanged back to a consistent chunk (zero on padding), because my filters
        read halo pixels. The pooling layer exchanges h itself and returns its gradient on my
        output tile. Collective over ``Topology.spatial`` (the exchanges of this layer and of
        the pooling layer) and, if there are data replicas, ``Topology.data`` (gradient sum).

        ``b = batch_size``, the global minibatch size (default ``B``; with data replicas each
        holds some rows of the batch and the gradients are summed over ``Topology.data``).
        One :class:`~distnet.layers.step.TrainingStep` (``step``, default a new one on this
        layer's topology) with :meth:`pretrain_forward_backward`: both gradients, their sum over
        ``data`` (one bucket), then V's update and renormalisation, then W's (plain SGD at
        ``pretrain_learning_rate``: :meth:`pretrain_mode`).

        Returns ``(rcost, spcost)``, this rank's partial sums (0-d float64 ``xp`` arrays, left on
        the device so that a step does not wait for them; ``float()`` them): 1/2 sum of the
        squared error over my input tile and the batch, lambda * sum of my pooled outputs. Their
        sums over the spatial ranks (and data replicas) are the global costs (each pixel, each
        pooled unit once).
        """
        b = x.shape[0] if batch_size is None else batch_size
        step = step or TrainingStep(self.ctx.topology, self.ctx.backend.host_staging)
        return tuple(step(lambda after_layer: self.pretrain_forward_backward(x, b),
                          [(self.decoder, self.decoder.param), (self, self._params[0])], self.pretrain_optimizer,
                          reduce_outputs=False))

    def pretrain_forward_backward(self, x, b):
        """The sparse autoencoder's forward, cost and backward on ``x`` (:meth:`pretrain_step`):
        fills the gradients of V and W (batch sums divided by ``b``); returns
        ``[rcost, spcost]``, this rank's partial sums."""
        xp, lam = self.xp, self.sparsity
        xc = self._chunk(x)                                                  # (B, C, Hc, Wc)
        h = local_fprop(xc, self.W, self.fshape, self.stride)                # (B, K, ho, wo)
        diff = self._input_grad(self.decoder.fprop(h, xc.shape)) - x         # xhat - x on my tile
        rcost = 0.5 * xp.sum(diff * diff, dtype="float64")                  # stays on the device
        gh = self.decoder.bprop(h, self._chunk(diff) / b)                    # decoder, eps on chunk
        p = self.pooling.fprop(h)
        spcost = lam * xp.sum(p, dtype="float64")
        gh += self.pooling.bprop(xp.full(p.shape, lam / b, dtype=p.dtype))   # sparsity, dJ/dh
        self._params[0].grad[...] = local_bprop(xc, self.W, gh, self.fshape, self.stride, need_dx=False)[1]
        self._fresh = True                                                   # renormalise W after its update
        return [rcost, spcost]

    def describe(self):
        return f"{super().describe()}  nofm={self.nofm}"
