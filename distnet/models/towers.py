"""Tower networks (Chainer's model-parallel ParallelMLP): a wide MLP cut into ``T`` towers that
compute independently and exchange only at two layers.

Each tower ``t`` has two 3-layer MLPs (``Linear -> relu -> Linear -> relu -> Linear``)::

    first_t : D -> u/2 -> u/2 -> u          second_t : u -> u/2 -> u/2 -> K
    h = relu(sum_t first_t(x))              (exchange 1, after layer 3; every tower gets h)
    y = sum_t second_t(h)                   (exchange 2, after layer 6)
    loss = softmax cross-entropy(y, labels) / B_global

On one process all towers run in order; on ``T`` ranks (``Topology.pipe``, one tower per rank)
each exchange is one Allreduce (sum) on ``Topology.pipe``, and so is its backward: ``dL/dz_t`` of
exchange 1 is the sum over the towers of ``dL/dh`` (every tower's second MLP reads ``h``); the
gradient of ``y`` is the same on every tower. Two Allreduces per direction per step instead of
one per layer (vecpar). Data replicas (``Topology.data``) take contiguous parts of every
minibatch and sum their gradients. Every rank draws every tower's weights from one stream.
"""
import numpy as np

from ..comm.reduce import allreduce_sum
from ..ops.softmax import log_softmax


class Towers:
    """Keys: ``units`` (u, default 64), ``nout`` (K), ``ntowers`` (2), ``num_epochs``,
    ``batch_size`` (32), ``learning_rate`` (plain SGD, 0.1)."""

    config_types = {"units": int, "nout": int, "ntowers": int, "num_epochs": int, "batch_size": int,
                    "learning_rate": float}

    def __init__(self, nout, units=64, ntowers=2, num_epochs=1, batch_size=32, learning_rate=0.1):
        self.u, self.K, self.T = units, nout, ntowers
        self.num_epochs, self.batch_size, self.learning_rate = num_epochs, batch_size, learning_rate

    def configure(self, backend, topology, nin):
        """Draw every tower's weights (one stream) and keep this rank's towers: all of them on
        one stage, tower ``pipe_index`` when ``Topology.npipe == ntowers``."""
        if topology.npipe not in (1, self.T):
            raise ValueError(f"Towers with {self.T} towers runs on 1 or {self.T} pipe ranks, got {topology.npipe}")
        self.backend, self.topology, self.dtype = backend, topology, backend.dtype
        rng = np.random.RandomState(backend.rng_seed)
        u, h = self.u, self.u // 2
        sizes = {"first": [(nin, h), (h, h), (h, u)], "second": [(u, h), (h, h), (h, self.K)]}
        towers = []
        for _ in range(self.T):
            tw = {}
            for half, dims in sizes.items():
                tw[half] = [(rng.normal(0, 1 / np.sqrt(a), size=(b, a)).astype(self.dtype),
                             np.zeros(b, dtype=self.dtype)) for a, b in dims]
            towers.append(tw)
        self.mine = list(range(self.T)) if topology.npipe == 1 else [topology.pipe_index]
        self.towers = {t: towers[t] for t in self.mine}

    def _sum(self, parts):
        """Sum of this rank's tower arrays, then over ``Topology.pipe`` (collective there)."""
        s = parts[0].copy()
        for p in parts[1:]:
            s += p
        if self.topology.npipe > 1:
            allreduce_sum([s], self.topology.pipe, self.backend.host_staging)
        return s

    @staticmethod
    def _mlp(layers, x):
        acts = [x]
        for k, (W, b) in enumerate(layers):
            x = x @ W.T + b
            if k < 2:
                x = np.maximum(x, 0)
            acts.append(x)
        return x, acts

    @staticmethod
    def _mlp_backward(layers, acts, dy, grads):
        for k in range(2, -1, -1):
            if k < 2:
                dy = dy * (acts[k + 1] > 0)
            W, _ = layers[k]
            grads.append((dy.T @ acts[k], dy.sum(axis=0)))
            dy = dy @ W
        grads.reverse()
        return dy

    def forward(self, x):
        """Logits ``(b, K)`` (the same on every tower rank) and the caches."""
        first = {t: self._mlp(self.towers[t]["first"], x) for t in self.mine}
        z = self._sum([first[t][0] for t in self.mine])           # exchange 1
        h = np.maximum(z, 0)
        second = {t: self._mlp(self.towers[t]["second"], h) for t in self.mine}
        y = self._sum([second[t][0] for t in self.mine])          # exchange 2
        return y, (first, second, z)

    def train_batch(self, x, labels):
        """One SGD step on a global minibatch (every rank passes the same rows); returns the
        summed loss of the batch, the same on every rank."""
        t = self.topology
        part = np.array_split(np.arange(len(x)), t.ndata)[t.data_index]
        n, x, labels = len(x), x[part], labels[part]
        y, (first, second, z) = self.forward(x)
        logp = log_softmax(y)
        loss = np.array([-logp[np.arange(len(x)), labels].sum()], dtype=np.float64)
        dy = np.exp(logp)
        dy[np.arange(len(x)), labels] -= 1
        dy /= n
        grads = {}
        dh = {}
        for k in self.mine:
            g = []
            dh[k] = self._mlp_backward(self.towers[k]["second"], second[k][1], dy, g)
            grads[k, "second"] = g
        dz = self._sum([dh[k] for k in self.mine]) * (z > 0)     # backward of exchange 1
        for k in self.mine:
            g = []
            self._mlp_backward(self.towers[k]["first"], first[k][1], dz, g)
            grads[k, "first"] = g
        flat = [a for key in sorted(grads) for pair in grads[key] for a in pair]
        if t.ndata > 1:
            allreduce_sum(flat + [loss], t.data, self.backend.host_staging, kind="allreduce_grad")
        for key in sorted(grads):
            for (W, b), (dW, db) in zip(self.towers[key[0]][key[1]], grads[key]):
                W -= self.learning_rate * dW
                b -= self.learning_rate * db
        return float(loss[0])

    def fit(self, x, labels):
        """``num_epochs`` epochs in a fixed per-epoch permutation; returns the mean costs."""
        costs = []
        for epoch in range(self.num_epochs):
            order = np.random.RandomState(self.backend.rng_seed * 1000 + epoch).permutation(len(x))
            total = 0.0
            for a in range(0, len(x), self.batch_size):
                idx = order[a:a + self.batch_size]
                total += self.train_batch(x[idx], labels[idx])
            costs.append(total / len(x))
        return costs

    def misclass_rate(self, x, labels):
        """Percent of rows of ``x`` whose largest logit is not their label (this rank's rows of
        every replica: pass the whole set; collective like :meth:`forward`)."""
        return 100.0 * float((self.forward(x)[0].argmax(axis=1) != labels).mean())
