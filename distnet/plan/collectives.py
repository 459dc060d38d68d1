"""Costs of the collectives a training step runs, in the alpha-beta model, following Thakur,
Rabenseifner and Gropp, "Optimization of Collective Communication Operations in MPICH" (2005).

An Allreduce of ``n`` bytes over ``P`` ranks costs, by algorithm:

* recursive doubling (short messages): ``ceil(log2 P)`` steps, each exchanging the whole
  message: ``log2(P) * (alpha + n / beta)``;
* Rabenseifner's reduce-scatter by recursive halving, then an allgather by recursive doubling
  (long messages): ``2 log2(P) * alpha + 2 (P - 1) / P * n / beta``;

and MPICH picks by message size; the model takes the cheaper of the two, which is what that
choice approximates. Over several nodes the steps differ: ranks ``k * r ... k * r + r - 1``
share node ``k``, so in recursive doubling the steps between partners less than ``r`` apart stay
inside a node and the other ``log2(nodes)`` cross the network. In Rabenseifner's halving the
first steps exchange with the farthest partners and carry the largest halves: of the
``(P - 1) / P * n`` bytes a rank sends in the reduce-scatter, ``(1 - 1 / nodes) * n`` cross the
network. Inter-node bytes go through the node's interface, which every rank of the node uses
at once (``Machine.sharing``): ``beta_inter / sharing`` per rank. The cost of the additions
themselves is left out (memory-bound, small beside the transfers).
"""
import math


def _log2(p):
    return math.ceil(math.log2(p)) if p > 1 else 0


def recursive_doubling(nbytes, nranks, machine, ranks_per_node=None, sharing=None):
    """Seconds of a recursive-doubling Allreduce of ``nbytes`` over ``nranks`` ranks placed
    ``ranks_per_node`` to a node (default ``machine.ranks_per_node``; None: one node), with
    ``sharing`` ranks sending through a node's interface at once (default
    ``machine.sharing(nranks)``: more when several communicators reduce at once)."""
    if nranks <= 1 or nbytes == 0:
        return 0.0
    steps = _log2(nranks)
    inner = min(steps, _log2(min(ranks_per_node or machine.ranks_per_node or nranks, nranks)))
    outer = steps - inner
    m = machine
    share = sharing or m.sharing(nranks)
    return (inner * (m.alpha + nbytes / m.beta)
            + outer * (m.alpha_inter + nbytes * share / m.beta_inter))


def rabenseifner(nbytes, nranks, machine, ranks_per_node=None, sharing=None):
    """Seconds of a reduce-scatter + allgather Allreduce (Rabenseifner) of ``nbytes`` over
    ``nranks`` ranks placed ``ranks_per_node`` to a node (see the module docstring)."""
    if nranks <= 1 or nbytes == 0:
        return 0.0
    m = machine
    per_node = min(ranks_per_node or m.ranks_per_node or nranks, nranks)
    nodes = -(-nranks // per_node)
    steps = _log2(nranks)
    outer_steps = _log2(nodes)
    inter = (1.0 - 1.0 / nodes) * nbytes                 # crosses the network, each way
    intra = (nranks - 1) / nranks * nbytes - inter
    share = sharing or m.sharing(nranks)
    return 2 * ((steps - outer_steps) * m.alpha + outer_steps * m.alpha_inter
                + intra / m.beta + inter * share / m.beta_inter)


def allreduce(nbytes, nranks, machine, ranks_per_node=None, sharing=None):
    """Seconds of an Allreduce of ``nbytes`` over ``nranks`` ranks: the cheaper algorithm
    (:func:`recursive_doubling` for short messages, :func:`rabenseifner` for long ones)."""
    return min(recursive_doubling(nbytes, nranks, machine, ranks_per_node, sharing),
               rabenseifner(nbytes, nranks, machine, ranks_per_node, sharing))


def members_per_node(ranks, machine):
    """The most members of the communicator of world ``ranks`` (a sequence) on one node."""
    if not machine.ranks_per_node:
        return len(ranks)
    counts = {}
    for r in ranks:
        counts[machine.node_of(r)] = counts.get(machine.node_of(r), 0) + 1
    return max(counts.values())


def ring(nbytes, nranks, machine):
    """Seconds of a ring Allreduce on one node (``2 (P - 1)`` messages): what the model used
    before, kept for comparison in the tests and the docs."""
    if nranks <= 1 or nbytes == 0:
        return 0.0
    return 2 * (nranks - 1) * machine.alpha + 2 * (nranks - 1) / nranks * nbytes / machine.beta
