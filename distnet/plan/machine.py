"""The machine a plan is made for: the alpha-beta constants inside a node and between nodes,
how many ranks share a node and how many cores it has, and the compute rates of one rank (one
default rate per kind of work, or rates measured per kind of layer: :mod:`.calibrate`)."""
import json
from dataclasses import asdict, dataclass, field, fields

from ..errors import ConfigError


def work_kind(kind):
    """The key of a layer kind (its class name) in :attr:`Machine.rates`: a distributed layer
    does the work of its one-process twin (``ConvLayerDist`` -> ``ConvLayer``)."""
    return kind[:-len("Dist")] if kind.endswith("Dist") else kind


@dataclass
class Machine:
    """Constants of the cost model.

    ``alpha`` / ``beta``: seconds per message and bytes/s per rank between two ranks of one
    node (shared memory: 1 us, 10 GB/s). ``alpha_inter`` / ``beta_inter``: the same between
    nodes, ``beta_inter`` being the bandwidth of one node's network interface, shared by all its
    ranks (5 us, 12.5 GB/s: a 100 Gb/s link). ``ranks_per_node``: ranks ``k * r ... k * r + r - 1``
    share node ``k`` (how MPICH's and Slurm's block placement number them); None: every rank
    on one node. ``flop_rate``: FLOP/s per rank for the GEMMs (50 GFLOP/s: one AVX-512 core
    running numpy), ``mem_rate``: bytes/s per rank for memory-bound work (copies, pooling, LCN).

    ``rates``: measured rates per layer kind (:func:`work_kind` of its class name), which
    replace the two above for that kind: FLOP/s of a layer with multiply-adds (its whole time,
    memory traffic included), bytes/s of its stated memory traffic otherwise; the key ``"cost"``:
    bytes/s of the rest of a step (the cost and its gradient, the update) per byte of the last
    layer's output. ``cores``: cores of one node; None: a core per rank. When more ranks share
    a node than it has cores, compute and memory time stretch by ``ranks / cores``
    (:meth:`oversubscription`). ``runtime_bytes``: the memory a process holds beyond its
    imports for the MPI library (its shared-memory segments); 0: not counted.
    """

    alpha: float = 1e-6
    beta: float = 10e9
    flop_rate: float = 50e9
    mem_rate: float = 5e9
    alpha_inter: float = 5e-6
    beta_inter: float = 12.5e9
    ranks_per_node: int = None
    cores: int = None
    rates: dict = field(default_factory=dict)
    runtime_bytes: int = 0

    def node_of(self, rank):
        """The node index of world rank ``rank`` (an int or an integer numpy array)."""
        return rank // self.ranks_per_node if self.ranks_per_node else rank * 0

    def nodes(self, nranks):
        """Nodes that ``nranks`` ranks fill."""
        return -(-nranks // self.ranks_per_node) if self.ranks_per_node else 1

    def sharing(self, nranks):
        """Ranks that send through one node's network interface at once when every rank takes
        part (a gradient Allreduce): the ranks of a full node."""
        return min(self.ranks_per_node or nranks, nranks)

    def oversubscription(self, nranks):
        """How much slower a rank computes when ``nranks`` ranks run, ``ranks_per_node`` of them
        sharing a node of ``cores`` cores: ``max(1, ranks on a node / cores)`` (1 without
        ``cores``)."""
        if not self.cores:
            return 1.0
        return max(1.0, min(self.ranks_per_node or nranks, nranks) / self.cores)

    def kernel_threads(self, nranks):
        """distnet's kernel threads per rank when ``nranks`` ranks run: with ``cores``, what a
        run would choose (:func:`~distnet.ops.threads.thread_plan`: the node's cores shared by
        its ranks, unless ``OPENBLAS_NUM_THREADS`` & co. or ``DISTNET_KERNEL_THREADS`` say
        otherwise in this environment); else 1."""
        if not self.cores:
            return 1
        from ..ops.threads import thread_plan
        return thread_plan(self.cores, min(self.ranks_per_node or nranks, nranks)).kernel

    def seconds(self, kind, flops, mem_bytes):
        """``(compute, memory)`` seconds of one rank's work of a layer of ``kind`` (its class
        name), not yet stretched by :meth:`oversubscription`: a measured rate of the kind takes
        the whole of it, else ``flops / flop_rate`` and ``mem_bytes / mem_rate``."""
        rate = self.rates.get(work_kind(kind))
        if rate is None:
            return flops / self.flop_rate, mem_bytes / self.mem_rate
        return (flops / rate, 0 * mem_bytes) if _any(flops) else (0 * flops, mem_bytes / rate)

    def to_json(self):
        """The machine as a JSON text (what :meth:`load` reads back)."""
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def load(cls, path):
        """The machine of a JSON file (:meth:`to_json`'s keys, any subset; the others keep their
        defaults); a file that is not one fails with one line naming the key."""
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            raise ConfigError(f"{path}: not a machine file ({e})") from None
        known = {f.name for f in fields(cls)}
        if not isinstance(d, dict) or set(d) - known:
            bad = sorted(set(d) - known) if isinstance(d, dict) else type(d).__name__
            raise ConfigError(f"{path}: unknown machine keys {bad} (known: {', '.join(sorted(known))})")
        for k, v in d.items():
            if not _valid(k, v):
                raise ConfigError(f"{path}: {k} must be {_KINDS.get(k, 'a number > 0')}, got {v!r}")
        return cls(**d)


#: What a machine file's keys hold, where not a number > 0.
_KINDS = {"ranks_per_node": "an integer > 0 or null", "cores": "an integer > 0 or null",
          "rates": "an object of numbers > 0 (by layer kind)", "alpha": "a number >= 0",
          "alpha_inter": "a number >= 0", "runtime_bytes": "an integer >= 0"}


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _valid(key, value):
    if key in ("ranks_per_node", "cores"):
        return value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0)
    if key == "rates":
        return isinstance(value, dict) and all(_number(v) and v > 0 for v in value.values())
    if key in ("alpha", "alpha_inter", "runtime_bytes"):
        return _number(value) and value >= 0
    return _number(value) and value > 0


def _any(v):
    try:
        return bool(v.any())
    except AttributeError:
        return bool(v)
