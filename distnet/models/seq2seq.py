"""Seq2Seq: an encoder LSTM stack and a decoder LSTM stack, on one process or on two pipeline
stages (model parallelism beyond a chain).

Model (ids are ``(B, T)`` padded token arrays, :mod:`distnet.datasets.sequences`)::

    encoder:  e = Es[src];        _, (hT, cT) = LSTM_enc(e, src mask, zeros)
    decoder:  d = Et[<bos> tgt[:-1]]; y, _ = LSTM_dec(d, tgt mask, (hT, cT))   (teacher forcing)
              z = y Wo^T + bo;    loss = sum of token cross-entropies (padding ignored) / B_global

Evaluation decodes greedily from ``<bos>`` for ``max_tgt_len`` steps; a sequence is right when
every token up to and including its ``<eos>`` is right (token accuracy: the share of the target
tokens predicted right at their position).

Placement: with ``pipe: 2`` the encoder runs on stage ``encoder_stage`` and the decoder on
``decoder_stage`` (default 0 and 1). The encoder's final states ``(hT, cT)`` (``2 x (L, b, H)``)
are one point-to-point message on ``Topology.pipe`` (:class:`distnet.comm.p2p.Send` /
:class:`~distnet.comm.p2p.Recv`, boundary 0); their gradient comes back as one message at the
start of the encoder's backward (docs/design.md#recurrent-state). Data replicas (``data: D``)
each take a contiguous part of every global minibatch and sum their gradients over
``Topology.data``; the loss is summed over ``Topology.pipe`` (zero on the encoder stage) and
``Topology.data``. Every rank draws every weight from one RNG stream, so all layouts start from
the same weights.

Training step and checkpoints: the encoder's and the decoder's parameters are two
:class:`Half` "layers" (``model.layers``) with placements like any layer's (whole tensors,
summed over ``Topology.data``), so the gradient sums, clipping by global norm and the learning
rule are the one :class:`~distnet.layers.step.TrainingStep` of every model, and checkpoints
(:mod:`distnet.models.checkpoint`) store every weight and its Adam moments in the global layout:
a checkpoint of any layout resumes on any other. Dropout masks and the epoch's order are drawn
from the seed, the epoch and the batch, so a resumed run needs no RNG state.
"""
import logging

import numpy as np

from ..comm.p2p import PipeChannel, Recv, Send
from ..comm.reduce import allreduce_sum
from ..config.builder import config_error, config_given, config_where
from ..errors import ConfigError
from ..layers.params import Param
from ..layers.placement import OVER_DATA, ParamPlacement, Placement
from ..layers.step import TrainingStep
from ..ops.embedding import embed, embed_grad, linear_steps, linear_steps_backward, token_xent
from ..ops.lstm import stack_backward, stack_forward
from ..optim.optimizer import Optimizer
from ..optim.rates import LearningRates
from ..optim.rules import Adam, LearningRule
from .finite import after_step as check_finite_after_step

BOS, EOS = 2, 3


class Half:
    """The encoder's or the decoder's parameters as one "layer" of the model, so that the one
    training step (:class:`~distnet.layers.step.TrainingStep`: gradient sums, clipping, learning
    rule) and checkpoints (:mod:`distnet.models.checkpoint`, every parameter in its global
    layout) treat them as they treat any layer's. Every parameter is whole on its stage
    (``sharded`` False) and summed over ``Topology.data``; on the other stage the half holds none."""

    #: A half has no rate of its own: the learning rule's, else the model's (LearningRates).
    learning_rate = None

    def __init__(self, name, shapes, held):
        self.name = name
        #: Each parameter's global shape, in model order (a dict name -> shape).
        self.placement = Placement(None, None, tuple(ParamPlacement(k, tuple(v), tuple(v), reduce_over=OVER_DATA)
                                                     for k, v in shapes.items()))
        self.held = held
        self._params = []

    def bind(self, values):
        """Hold ``values`` (name -> array, this rank's) when this rank runs the half."""
        self._params = [Param(pp, values[pp.name], None) for pp in self.placement.params] \
            if self.held else []

    def params(self):
        return list(self._params)

    def buffers(self):
        return []

    def after_update(self):
        """Nothing to do after an update."""

    def describe(self):
        return f"{self.name}: {sum(pp.size for pp in self.placement.params)} parameters"


class Seq2Seq:
    """Keys: ``embed`` (embedding size, default 32), ``hidden`` (LSTM state size, 64),
    ``nlayers`` (LSTM layers in each stack, 1), ``dropout`` (probability of dropping an input of
    LSTM layers 2 .. nlayers in training, 0; masks drawn per global minibatch from the backend
    seed, so every layout draws the same), ``num_epochs``, ``batch_size`` (64),
    ``learning_rule`` (as for MLP: ``!obj:distnet.learning_rules.Adam {...}``, ``AdamW``,
    ``GradientDescent``, with their ``schedule``, ``weight_decay`` and ``max_grad_norm`` keys;
    default ``Adam {learning_rate: <learning_rate>, max_grad_norm: 5.0}``), ``learning_rate``
    (0.01: the default rule's rate, or the rate of a rule that gives none),
    ``encoder_stage`` / ``decoder_stage`` (pipeline stages, default 0 and 1; with ``pipe: 2``
    they must differ)."""

    config_types = {"embed": int, "hidden": int, "nlayers": int, "num_epochs": int, "batch_size": int,
                    "learning_rate": float, "learning_rule": ("obj", "learning_rule"), "dropout": float,
                    "encoder_stage": int, "decoder_stage": int}
    input_layout = None
    #: No shuffle RNG to checkpoint: each epoch's order is drawn from the seed and the epoch.
    shuffle_rng = None

    def __init__(self, num_epochs=10, embed=32, hidden=64, nlayers=1, batch_size=64, learning_rate=0.01,
                 learning_rule=None, encoder_stage=0, decoder_stage=1, dropout=0.0):
        if not 0.0 <= dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {dropout}", key="dropout")
        self.dropout = dropout
        for k, v in (("embed", embed), ("hidden", hidden), ("nlayers", nlayers), ("batch_size", batch_size)):
            if v < 1:
                raise ConfigError(f"{k} must be >= 1, got {v}", key=k)
        if num_epochs < 0:
            raise ConfigError(f"num_epochs must be >= 0, got {num_epochs}", key="num_epochs")
        if not learning_rate > 0:
            raise ConfigError(f"learning_rate must be > 0, got {learning_rate}", key="learning_rate")
        if learning_rule is not None and not isinstance(learning_rule, LearningRule):
            raise ConfigError(f"learning_rule must be a learning rule object (distnet.learning_rules.Adam, "
                              f"AdamW, GradientDescent), got {learning_rule!r}", key="learning_rule")
        for k, v in (("encoder_stage", encoder_stage), ("decoder_stage", decoder_stage)):
            if v not in (0, 1):
                raise ConfigError(f"{k} must be 0 or 1 (the encoder and the decoder are two stages), got {v}",
                                  key=k)
        self.num_epochs, self.E, self.H, self.L = num_epochs, embed, hidden, nlayers
        self.batch_size, self.learning_rate = batch_size, learning_rate
        self.learning_rule = (learning_rule if learning_rule is not None
                              else Adam(learning_rate=learning_rate, max_grad_norm=5.0))
        #: The rule of both halves, at the rule's rate, else the model's ``learning_rate``.
        self.optimizer = Optimizer(self.learning_rule, LearningRates(learning_rate, self.learning_rule))
        self.encoder_stage, self.decoder_stage = encoder_stage, decoder_stage
        #: Optimiser steps done (restored from checkpoints): Adam's bias correction and step
        #: schedules read it.
        self.steps = 0
        #: The encoder's and the decoder's parameters (:class:`Half`), set by :meth:`configure`.
        self.layers = ()

    def optimizer_state_names(self):
        """Names of the arrays the learning rule keeps per parameter (Adam's ``m``, ``v``)."""
        return self.optimizer.state_names

    def learning_rates(self, epoch):
        """``{half name: learning rate}`` in ``epoch`` (TensorBoard's per-epoch rates)."""
        return self.optimizer.learning_rates(self.layers, epoch)

    def describe_learning_rates(self):
        """Lines for ``distnet show``: the rate of the two halves."""
        halves = [Half(name, {}, False) for name in ("encoder", "decoder")]
        return [f"learning rate: {self.optimizer.rates.describe(halves)}"]

    def notes(self):
        """``[(logging.WARNING, text)]`` when the file's ``learning_rate`` is not used: a
        ``learning_rule`` with a rate of its own (Adam's default 0.001 counts) replaces it."""
        rule = self.learning_rule
        if not (config_given(self, "learning_rate") and config_given(self, "learning_rule")
                and self.optimizer.rates.source(Half)[1] != "model"):
            return []
        where = config_where(self, "learning_rate")
        rate = f"{rule.learning_rate:g}" + ("" if config_given(rule, "learning_rate") else
                                           f", {type(rule).__name__}'s default")
        return [(logging.WARNING, f"{where}: the model's learning_rate {self.learning_rate:g} is not used: the "
                 f"learning rule's ({rate}) applies; give the rate to the learning rule")]

    # -- set-up -------------------------------------------------------------------------------
    def check_stages(self, npipe):
        """The stage keys against the run's ``pipe`` (ConfigError)."""
        if npipe not in (1, 2):
            raise config_error(self, f"Seq2Seq runs on 1 or 2 pipeline stages (encoder, decoder), got "
                               f"pipe = {npipe}")
        if npipe == 2 and self.encoder_stage == self.decoder_stage:
            raise config_error(self, f"with pipe: 2 the decoder must be on the other stage than its encoder "
                               f"(both are on stage {self.encoder_stage})", "decoder_stage")

    def configure(self, backend, topology, Vs, Vt):
        """Bind the run and draw every weight (every rank the same, one stream)."""
        self.backend, self.topology = backend, topology
        self.check_stages(topology.npipe)
        self.xp = xp = backend.xp
        self.dtype = backend.dtype
        self.split = topology.npipe == 2
        rng = np.random.RandomState(backend.rng_seed)
        E, H, L = self.E, self.H, self.L

        def u(*shape, scale):
            return rng.uniform(-scale, scale, size=shape).astype(self.dtype)

        def stack(prefix):
            out = {}
            for l in range(L):
                s = 1 / np.sqrt(H)
                out[f"{prefix}.Wx{l}"] = u(4 * H, E if l == 0 else H, scale=s)
                out[f"{prefix}.Wh{l}"] = u(4 * H, H, scale=s)
                b = np.zeros(4 * H, dtype=self.dtype)
                b[H:2 * H] = 1.0          # forget-gate bias 1
                out[f"{prefix}.b{l}"] = b
            return out

        enc = {"enc.embed": u(Vs, E, scale=0.1), **stack("enc")}
        dec = {"dec.embed": u(Vt, E, scale=0.1), **stack("dec"),
               "dec.Wo": u(Vt, H, scale=1 / np.sqrt(H)), "dec.bo": np.zeros(Vt, dtype=self.dtype)}
        self.Vs, self.Vt = Vs, Vt
        stage = topology.pipe_index
        self.runs_encoder = not self.split or stage == self.encoder_stage
        self.runs_decoder = not self.split or stage == self.decoder_stage
        # drawn on the host from the one stream, then copied to the backend's device
        self.params = {k: xp.asarray(v) for k, v in
                       {**(enc if self.runs_encoder else {}), **(dec if self.runs_decoder else {})}.items()}
        self.layers = (Half("encoder", {k: v.shape for k, v in enc.items()}, self.runs_encoder),
                       Half("decoder", {k: v.shape for k, v in dec.items()}, self.runs_decoder))
        for half in self.layers:
            half.bind(self.params)
        #: ``[(half, Param)]`` this rank trains (the non-finite check reads it too).
        self._params = [(half, p) for half in self.layers for p in half.params()]
        self.step = TrainingStep(topology, backend.host_staging)
        self.steps = 0
        self._step_key = (0, 0)   # (epoch, batch): keys the dropout masks (fit_epoch sets it)
        if self.split:
            ch = PipeChannel(topology.pipe, backend.host_staging)
            self.channel = ch
            self._send = Send(ch, self.decoder_stage, 0) if self.runs_encoder else None
            self._recv = Recv(ch, self.encoder_stage, 0) if self.runs_decoder else None

    def _weights(self, prefix):
        p = self.params
        return [(p[f"{prefix}.Wx{l}"], p[f"{prefix}.Wh{l}"], p[f"{prefix}.b{l}"]) for l in range(self.L)]

    def _mask(self, lengths, T, dtype):
        return (self.xp.arange(T)[None, :] < lengths[:, None]).astype(dtype)

    # -- the two halves -----------------------------------------------------------------------
    def _encode(self, src, src_len, drop=None):
        b = len(src)
        zeros = self.xp.zeros((self.L, b, self.H), dtype=self.dtype)
        e = embed(src, self.params["enc.embed"])
        _, hT, cT, caches = stack_forward(e, self._mask(src_len, src.shape[1], self.dtype), zeros, zeros,
                                          self._weights("enc"), drop)
        return self.xp.stack([hT, cT]), (src, caches, drop)

    def _encode_backward(self, dstates, cache, grads):
        src, caches, drop = cache
        dy = self.xp.zeros(src.shape + (self.H,), dtype=self.dtype)
        de, _, _, g = stack_backward(dy, dstates[0], dstates[1], caches, drop)
        self._put(grads, "enc", g)
        grads["enc.embed"] = embed_grad(src, de, self.Vs)

    def _put(self, grads, prefix, g):
        for l, (dWx, dWh, db) in enumerate(g):
            grads[f"{prefix}.Wx{l}"], grads[f"{prefix}.Wh{l}"], grads[f"{prefix}.b{l}"] = dWx, dWh, db

    def _decode_train(self, states, tgt, tgt_len, divisor, grads, drop=None):
        """Teacher-forced decoder forward and backward; returns (summed loss, dstates)."""
        b, T = tgt.shape
        xp = self.xp
        inp = xp.concatenate([xp.full((b, 1), BOS, dtype=tgt.dtype), tgt[:, :-1]], axis=1)
        mask = self._mask(tgt_len, T, self.dtype)
        d = embed(inp, self.params["dec.embed"])
        y, _, _, caches = stack_forward(d, mask, states[0], states[1], self._weights("dec"), drop)
        z = linear_steps(y, self.params["dec.Wo"], self.params["dec.bo"])
        loss, dz = token_xent(z, tgt, mask)
        dz /= divisor
        dy, grads["dec.Wo"], grads["dec.bo"] = linear_steps_backward(y, self.params["dec.Wo"], dz)
        dd, dh0, dc0, g = stack_backward(dy, xp.zeros_like(states[0]), xp.zeros_like(states[1]), caches, drop)
        self._put(grads, "dec", g)
        grads["dec.embed"] = embed_grad(inp, dd, self.Vt)
        return loss, xp.stack([dh0, dc0])

    def _decode_greedy(self, states, T):
        """Greedy decoding for ``T`` steps -> predicted ids ``(b, T)``."""
        b = states.shape[2]
        h, c = states[0], states[1]
        xp = self.xp
        tok = xp.full(b, BOS, dtype=xp.int64)
        one = xp.ones((b, 1), dtype=self.dtype)
        out = xp.zeros((b, T), dtype=xp.int64)
        w = self._weights("dec")
        for t in range(T):
            x = embed(tok[:, None], self.params["dec.embed"])
            y, h, c, _ = stack_forward(x, one, h, c, w)
            tok = linear_steps(y, self.params["dec.Wo"], self.params["dec.bo"])[:, 0].argmax(axis=1)
            out[:, t] = tok
        return out

    # -- training and evaluation ----------------------------------------------------------------
    def _my_rows(self, n):
        """This data replica's contiguous slice of ``n`` rows."""
        t = self.topology
        parts = np.array_split(np.arange(n), t.ndata)[t.data_index]
        return slice(int(parts[0]), int(parts[-1]) + 1) if len(parts) else slice(0, 0)

    def _states_shape(self, b):
        return (2, self.L, b, self.H)

    def train_batch(self, src, src_len, tgt, tgt_len, epoch=0):
        """One step on a global minibatch (every rank passes the same rows): forward and backward
        of this rank's half on its replica's rows, then the one training step's gradient sums
        over ``Topology.data``, clipping and learning rule (:class:`~distnet.layers.step
        .TrainingStep`). Returns the summed loss of the batch (the same on every rank).
        Collective over ``Topology.pipe``, ``Topology.data`` and (clipping) the world."""
        rows, divisor = self._my_rows(len(src)), len(src)
        de, dd = self._dropout_masks(len(src), src.shape[1], tgt.shape[1], rows)
        xp = self.xp
        src, src_len, tgt, tgt_len = (xp.asarray(a[rows]) for a in (src, src_len, tgt, tgt_len))
        b = len(src)

        def run(after_layer):   # the gradients are final at its end: summed after it
            grads, loss = {}, xp.zeros(1, dtype="float64")
            if not self.split:
                states, cache = self._encode(src, src_len, de)
                loss[0], dstates = self._decode_train(states, tgt, tgt_len, divisor, grads, dd)
                self._encode_backward(dstates, cache, grads)
            elif self.runs_encoder:
                states, cache = self._encode(src, src_len, de)
                self._send.forward(states)
                dstates = self._send.backward(self._states_shape(b), self.dtype, self.xp).wait()
                self._encode_backward(dstates, cache, grads)
            else:
                states = self._recv.forward(self._states_shape(b), self.dtype, self.xp).wait()
                loss[0], dstates = self._decode_train(states, tgt, tgt_len, divisor, grads, dd)
                self._recv.backward(dstates)
            if self.split:
                self.channel.wait_sends()
            for _, p in self._params:
                p.grad = grads[p.name]
            return [loss]

        loss, = self.step(run, self._params, self.optimizer, self.steps + 1, epoch)
        self.steps += 1
        if self.split:   # the loss lives on the decoder's stage
            allreduce_sum([loss], self.topology.pipe, self.backend.host_staging)
        return float(loss[0])

    def _dropout_masks(self, n, Ts, Tt, rows):
        """(encoder, decoder) dropout multipliers of this replica's ``rows`` of the global
        minibatch (``n`` rows), or ``(None, None)``: drawn for all ``n`` rows on every rank from
        a stream keyed by the seed, the epoch and the batch."""
        if not self.dropout or self.L == 1:
            return None, None
        rng = np.random.RandomState([self.backend.rng_seed, *self._step_key])
        keep = 1.0 - self.dropout
        out = []
        for T in (Ts, Tt):
            out.append([self.xp.asarray(((rng.random_sample((n, T, self.H)) < keep) / keep).astype(self.dtype)[rows])
                        for _ in range(self.L - 1)])
        return tuple(out)

    # -- the training loop's protocol (distnet.experiments.loop) -------------------------------
    def start(self, resume=None):
        """The first epoch to train: 0, or ``resume.epoch`` (a
        :class:`~distnet.models.checkpoint.ResumeState`; no RNG state to restore)."""
        return 0 if resume is None else int(resume.epoch)

    def before_training(self, train):
        """Nothing runs before the first epoch (no pretraining): no records."""
        return iter(())

    #: What an evaluated split records (:meth:`split_metrics`; a checkpoint monitor names them).
    metric_names = ("token_acc", "seq_acc", "misclass")

    def split_metrics(self, split):
        """``{"token_acc", "seq_acc", "misclass"}`` (percent; misclass = 100 - sequence
        accuracy) of greedy decoding of ``split``. Collective (see :meth:`evaluate`)."""
        token, seq = self.evaluate(split)
        return {"token_acc": token, "seq_acc": seq, "misclass": 100 - seq}

    def fit_epoch(self, data, epoch, on_batch=None, read_ahead=None, start=None):
        """One epoch over ``data = (src, src_len, tgt, tgt_len)`` in a per-epoch permutation
        (seeded by the backend seed and epoch: the same on every rank). Returns the mean loss
        per sequence. ``on_batch(epoch, batch, nbatches, running_cost)`` runs before every step
        (``running_cost``: the summed loss of the epoch's batches before it); the data is in
        memory, so ``read_ahead`` is not used. ``start``: ``(first batch, running cost)`` of an
        epoch a checkpoint interrupted (:meth:`Model.fit_epoch <distnet.models.model.Model.fit_epoch>`)."""
        src, src_len, tgt, tgt_len = data
        order = np.random.RandomState(self.backend.rng_seed * 1000 + epoch).permutation(len(src))
        first, total = start if start is not None else (0, 0.0)
        nb = (len(src) + self.batch_size - 1) // self.batch_size
        for k in range(first, nb):
            idx = order[k * self.batch_size:(k + 1) * self.batch_size]
            if on_batch is not None:
                on_batch(epoch, k, nb, total)
            self._step_key = (epoch, k)
            total += self.train_batch(src[idx], src_len[idx], tgt[idx], tgt_len[idx], epoch)
            check_finite_after_step(self, epoch, k, nb)   # every 16 steps and at the epoch end
        return total / len(src)

    def evaluate(self, data, batch=256):
        """Greedy decoding of ``data``; returns ``(token accuracy, sequence accuracy)`` in
        percent, the same on every rank. Collective over ``Topology.pipe`` and ``.data``."""
        src, src_len, tgt, tgt_len = data
        rows = self._my_rows(len(src))
        xp = self.xp
        src, src_len, tgt, tgt_len = (xp.asarray(a[rows]) for a in (src, src_len, tgt, tgt_len))
        counts = np.zeros(3, dtype=np.float64)   # right tokens, target tokens, right sequences (host)
        for a in range(0, len(src), batch):
            s = slice(a, a + batch)
            b = len(src[s])
            if not self.split or self.runs_encoder:
                states, _ = self._encode(src[s], src_len[s])
                if self.split:
                    self._send.forward(states)
            if self.split and self.runs_decoder:
                states = self._recv.forward(self._states_shape(b), self.dtype, self.xp).wait()
            if self.runs_decoder:
                pred = self._decode_greedy(states, tgt.shape[1])
                mask = self._mask(tgt_len[s], tgt.shape[1], "float64")
                right = (pred == tgt[s]) * mask
                counts += [float(right.sum()), float(mask.sum()),
                           float((right.sum(axis=1) == mask.sum(axis=1)).sum())]
            if self.split:
                self.channel.wait_sends()
        t = self.topology
        if self.split:
            allreduce_sum([counts], t.pipe, self.backend.host_staging)
        if t.ndata > 1:
            allreduce_sum([counts], t.data, self.backend.host_staging)
        return 100 * counts[0] / counts[1], 100 * counts[2] / len(data[0])

    def gather_params(self):
        """Every parameter (a dict of numpy arrays, host copies) on every rank: the decoder's come from its
        stage. Collective over ``Topology.pipe``."""
        xp = self.xp
        mine = {k: np.array(v, copy=True) if xp is np else xp.asnumpy(v) for k, v in self.params.items()}
        if not self.split:
            return mine
        parts = self.topology.pipe.allgather(mine)
        out = {}
        for p in parts:
            out.update(p)
        return out
