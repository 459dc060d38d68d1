"""The thread plan of a rank: how many BLAS threads and distnet kernel threads it runs.

A rank uses its share of its node's cores, ``node cores // ranks on this node`` (at least 1,
at most the cores its own affinity mask allows), unless the user chose:

1. the backend key ``threads: N`` (YAML), else
2. one of the variables ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``, ``OMP_NUM_THREADS``,
   ``BLIS_NUM_THREADS`` (the first one set, in that order), else
3. the share above.

``DISTNET_KERNEL_THREADS`` sets the kernel threads (:mod:`distnet.ops.parallel`) alone (``1``
turns distnet's own threading off); otherwise they equal the BLAS threads. Without this, every
rank's OpenBLAS starts as many threads as the node has cores: ``mpiexec -n 4`` on 2 cores ran
16 busy threads, 5-12x slower than one thread per rank.

:func:`thread_plan` is pure (numbers in, plan out); :func:`apply_plan` applies one to the BLAS
libraries loaded in this process (threadpoolctl) and to the kernel threads. The numbers of the
node come from :func:`distnet.comm.node.node_share`.
"""
import os
from dataclasses import dataclass

#: Variables that name a BLAS / OpenMP thread count, in the order they are consulted.
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS", "BLIS_NUM_THREADS")
KERNEL_VAR = "DISTNET_KERNEL_THREADS"


@dataclass(frozen=True)
class ThreadPlan:
    """blas : BLAS threads of this rank; kernel : distnet kernel threads; source : why (text)."""
    blas: int
    kernel: int
    source: str

    def describe(self):
        """``threads 1/rank (2 cores / 2 ranks on this node)`` (the run header's field)."""
        extra = f", kernel threads {self.kernel} ({KERNEL_VAR})" if self.kernel != self.blas else ""
        return f"threads {self.blas}/rank ({self.source}{extra})"


def _count(value):
    """A positive thread count from an environment value (``"4"``, ``"4,2"`` for nested
    OpenMP: the first level) that a C int holds, else None."""
    head = str(value).split(",")[0].strip()
    return int(head) if head.isdigit() and 1 <= int(head) < 2**31 else None


def thread_plan(node_cores, node_ranks, own_cores=None, env=None, key=None):
    """The :class:`ThreadPlan` of one rank.

    node_cores : cores the ranks of this node may run on (together).
    node_ranks : ranks on this node.
    own_cores : cores this rank may run on (default ``node_cores``): a rank bound to 2 cores
        never runs more than 2 threads.
    env : the environment (a mapping; default ``os.environ``): :data:`THREAD_VARS` and
        ``DISTNET_KERNEL_THREADS``.
    key : the backend's ``threads`` key (None: not given).
    """
    env = os.environ if env is None else env
    node_cores, node_ranks = max(1, int(node_cores)), max(1, int(node_ranks))
    own = node_cores if own_cores is None else max(1, int(own_cores))
    if key is not None:
        blas, source = int(key), f"backend key threads: {int(key)}"
    else:
        chosen = next(((k, _count(env[k])) for k in THREAD_VARS if _count(env.get(k, "")) is not None),
                      None)
        if chosen is not None:
            blas, source = chosen[1], f"{chosen[0]}={env[chosen[0]]}"
        else:
            blas = max(1, min(own, node_cores // node_ranks))
            source = (f"{node_cores} core{'s' * (node_cores != 1)} / {node_ranks} "
                      f"rank{'s' * (node_ranks != 1)} on this node")
    kernel = _count(env.get(KERNEL_VAR, "")) or blas
    return ThreadPlan(blas, kernel, source)


def apply_plan(plan):
    """Set this process's BLAS libraries (threadpoolctl; every one loaded now) to ``plan.blas``
    threads and distnet's kernel threads to ``plan.kernel``; returns ``plan``."""
    from . import parallel
    parallel.configure(plan)
    return plan


def blas_threads():
    """``[(library, threads)]`` as threadpoolctl reports them now (e.g. ``[("openblas", 1)]``)."""
    from threadpoolctl import threadpool_info
    return [(i["internal_api"], i["num_threads"]) for i in threadpool_info() if i.get("user_api") == "blas"]
