"""Parameters of a layer and how they are initialised and shared across ranks."""
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .placement import OVER_DATA, OVER_GRAD, ParamPlacement  # noqa: F401 - re-exported


@dataclass
class Param:
    """A parameter tensor with its gradient and optimiser state, and its
    :class:`~distnet.layers.placement.ParamPlacement` (``placement``: what it is globally, this
    rank's slice, who sums its gradient).

    ``value`` and ``grad`` have the same (local) shape; ``velocity`` is None until momentum is
    used (neon's ``momentum:`` path); ``state`` holds the arrays of a model's ``learning_rule``
    (``{name: array}`` shaped like ``value``, e.g. Adam's ``m`` and ``v``: sharded like the
    parameter), None until the first update. A buffer (not trained: batch norm's running
    statistics) is a Param with ``grad`` None. ``name``, ``reduce_over`` (the
    :class:`~distnet.layers.placement.GradientSum` that says over which sub-communicator of
    :class:`~distnet.comm.topology.Topology` ``grad`` is summed before the update) and
    ``sharded`` (whether ``value`` is a slice of a larger global tensor) are the placement's.
    Made by :meth:`from_placement`.
    """

    placement: ParamPlacement
    value: object
    grad: object
    velocity: object = None
    state: dict = None
    #: True when an identical copy of this parameter is held and counted on another rank of
    #: ``Topology.pipe`` (a layer shared by the towers of a tower network): the global gradient
    #: norm skips it here.
    copy_elsewhere: bool = False

    @property
    def name(self):
        return self.placement.name

    @property
    def reduce_over(self):
        return self.placement.reduce_over

    @property
    def sharded(self):
        return self.placement.sharded

    @classmethod
    def from_placement(cls, pp, value, xp, grad=True):
        """The parameter of placement ``pp`` holding ``value`` (this rank's part, numpy), moved
        to ``xp`` with a zero gradient (``grad=False``: a buffer, no gradient)."""
        v = xp.asarray(value)
        return cls(pp, v, xp.zeros_like(v) if grad else None)


_INIT_KEYS = {"uniform": {"low", "high"}, "gaussian": {"loc", "scale"}, "normal": {"loc", "scale"},
              "node_normalized": {"scale"}}


def check_weight_init(weight_init):
    """Validate a ``weight_init`` dict (docs/neon-semantics.md#weight-initialisation-keys) early,
    at construction time."""
    if not isinstance(weight_init, dict) or "type" not in weight_init:
        raise ConfigError("weight_init must be a mapping with a 'type' "
                          f"({', '.join(_INIT_KEYS)}), got {weight_init!r}", key="weight_init")
    kind = weight_init["type"]
    if kind not in _INIT_KEYS:
        raise ConfigError(f"weight_init type must be one of {', '.join(_INIT_KEYS)}, got {kind!r}",
                          key="weight_init")
    extra = set(weight_init) - _INIT_KEYS[kind] - {"type", "bias_init", "dtype"}
    if extra:
        raise ConfigError(f"weight_init of type {kind} does not take {sorted(extra)}; it takes "
                          f"{sorted(_INIT_KEYS[kind] | {'bias_init'})}", key="weight_init")
    return weight_init


def gen_weights(rng, shape, weight_init, dtype):
    """Draw a weight array of the *global* ``shape`` from ``rng`` (numpy ``RandomState``), as neon's
    ``gen_weights`` did: draws in float64, C order, then cast. Returns a numpy array."""
    kind = weight_init["type"]
    if kind == "uniform":
        w = rng.uniform(weight_init.get("low", 0.0), weight_init.get("high", 1.0), shape)
    elif kind in ("gaussian", "normal"):
        w = rng.normal(weight_init.get("loc", 0.0), weight_init.get("scale", 1.0), shape)
    else:  # node_normalized: Glorot's rule, a = scale * sqrt(6 / sum(shape))
        a = weight_init.get("scale", 1.0) * np.sqrt(6.0 / sum(shape))
        w = rng.uniform(-a, a, shape)
    return np.asarray(w, dtype=weight_init.get("dtype", dtype))


#: Values drawn at a time by :func:`gen_weights_part` (float64: 8 MiB): bounds what a rank holds
#: beyond its own slice while it walks the global stream.
DRAW_CHUNK = 2**20


class NonFiniteDraw(ValueError):
    """A drawn weight is not finite in the layer's dtype (the layer names it)."""


def check_finite(v):
    """Raise :class:`NonFiniteDraw` if any element of ``v`` (numpy) is inf or NaN."""
    if not np.isfinite(v).all():
        raise NonFiniteDraw(np.dtype(v.dtype).name)


def _sampler(rng, shape, weight_init):
    """``draw(n)``: the next ``n`` float64 values of :func:`gen_weights`'s stream for the global
    ``shape``. Uniform draws take one double per value and the gaussian ones keep the spare of
    each Box-Muller pair in the RandomState's own state (``has_gauss``), so ``n`` then ``m``
    values are exactly ``n + m`` values drawn at once."""
    kind = weight_init["type"]
    if kind == "uniform":
        lo, hi = weight_init.get("low", 0.0), weight_init.get("high", 1.0)
        return lambda n: rng.uniform(lo, hi, n)
    if kind in ("gaussian", "normal"):
        loc, scale = weight_init.get("loc", 0.0), weight_init.get("scale", 1.0)
        return lambda n: rng.normal(loc, scale, n)
    a = weight_init.get("scale", 1.0) * np.sqrt(6.0 / sum(shape))
    return lambda n: rng.uniform(-a, a, n)


def _positions(sel, n):
    """``sel`` (``...``, a slice or an index array of ``range(n)``) as a sorted int64 array."""
    if sel is Ellipsis:
        return np.arange(n, dtype=np.int64)
    if isinstance(sel, slice):
        return np.arange(n, dtype=np.int64)[sel]
    out = np.asarray(sel, dtype=np.int64)
    if out.size > 1 and not (np.diff(out) > 0).all():
        raise ValueError("gen_weights_part keeps rows and columns in increasing order only")
    return out


def _finite(v, c0):
    check_finite(v)


def gen_weights_part(rng, shape, weight_init, dtype, rows=Ellipsis, cols=Ellipsis, check=_finite,
                     chunk=DRAW_CHUNK):
    """``gen_weights(rng, shape, weight_init, dtype)[rows][:, cols]`` without the global array.

    ``shape`` is ``(nrows, ncols)``; ``rows`` is ``...``, a slice or an increasing index array;
    ``cols`` one such selection, or a tuple of them (then a list of arrays comes back, one per
    selection: a weight block and its bias column without a copy). The whole global stream is
    drawn (``rng`` ends where :func:`gen_weights` leaves it) in pieces of at most ``chunk``
    values and only the kept part is stored: a rank holds its result plus one piece.
    ``check(piece, c0)`` sees every piece (``(rows, columns c0...)`` in the cast dtype) on every
    rank, so that every rank raises alike (default: :class:`NonFiniteDraw` for inf or NaN).
    Bit for bit the values of :func:`gen_weights`."""
    nrows, ncols = shape
    out_dtype = np.dtype(weight_init.get("dtype", dtype))
    draw = _sampler(rng, shape, weight_init)
    r = _positions(rows, nrows)
    several = isinstance(cols, tuple)
    cs = [_positions(c, ncols) for c in (cols if several else (cols,))]
    keep = np.zeros(nrows, dtype=bool)
    keep[r] = True
    outs = [np.empty((len(r), len(c)), dtype=out_dtype) for c in cs]
    at = 0                                   # rows of the results filled
    if ncols <= chunk:                       # whole rows at a time
        block = max(1, chunk // max(ncols, 1))
        for r0 in range(0, nrows, block):
            r1 = min(nrows, r0 + block)
            v = np.asarray(draw((r1 - r0) * ncols).reshape(r1 - r0, ncols), dtype=out_dtype)
            check(v, 0)
            kept = keep[r0:r1]
            mine = v if kept.all() else v[kept]
            for c, out in zip(cs, outs):
                out[at:at + len(mine)] = mine[:, c]
            at += len(mine)
    else:                                    # rows longer than a piece: pieces of one row
        for row in range(nrows):
            for c0 in range(0, ncols, chunk):
                c1 = min(ncols, c0 + chunk)
                v = np.asarray(draw(c1 - c0), dtype=out_dtype)
                check(v[None], c0)
                if keep[row]:
                    for c, out in zip(cs, outs):
                        j0, j1 = np.searchsorted(c, c0), np.searchsorted(c, c1)
                        out[at, j0:j1] = v[c[j0:j1] - c0]
            at += int(keep[row])
    return outs if several else outs[0]
