"""The machine a plan is made for: the alpha-beta constants inside a node and between nodes,
how many ranks share a node, and the compute rates of one rank."""
from dataclasses import dataclass


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
    """

    alpha: float = 1e-6
    beta: float = 10e9
    flop_rate: float = 50e9
    mem_rate: float = 5e9
    alpha_inter: float = 5e-6
    beta_inter: float = 12.5e9
    ranks_per_node: int = None

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
