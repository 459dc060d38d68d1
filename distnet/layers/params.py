"""Parameters of a layer and how they are initialised and shared across ranks."""
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .placement import OVER_DATA, OVER_GRAD  # noqa: F401 - re-exported


@dataclass
class Param:
    """A parameter tensor with its gradient and optimiser state.

    ``value`` and ``grad`` have the same (local) shape; ``velocity`` is None until momentum is
    used (neon's ``momentum:`` path); ``state`` holds the arrays of a model's ``learning_rule``
    (``{name: array}`` shaped like ``value``, e.g. Adam's ``m`` and ``v``: sharded like the
    parameter), None until the first update. A buffer (not trained: batch norm's running
    statistics) is a Param with ``grad`` None. ``reduce_over`` names the sub-communicator of :class:`~distnet.comm.topology.Topology`
    over which ``grad`` must be summed before the update (:data:`OVER_GRAD` or
    :data:`OVER_DATA`); ``sharded`` says whether ``value`` is a slice of a larger global tensor.
    Made from the layer's :class:`~distnet.layers.placement.ParamPlacement` by
    :meth:`from_placement`.
    """

    name: str
    value: object
    grad: object
    reduce_over: str = OVER_GRAD
    sharded: bool = False
    velocity: object = None
    state: dict = None
    #: True when an identical copy of this parameter is held and counted on another rank of
    #: ``Topology.pipe`` (a layer shared by the towers of a tower network): the global gradient
    #: norm skips it here.
    copy_elsewhere: bool = False

    @classmethod
    def from_placement(cls, pp, value, xp, grad=True):
        """The parameter of placement ``pp`` holding ``value`` (this rank's part, numpy), moved
        to ``xp`` with a zero gradient (``grad=False``: a buffer, no gradient)."""
        v = xp.asarray(value)
        return cls(pp.name, v, xp.zeros_like(v) if grad else None, pp.reduce_over, pp.sharded)


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
