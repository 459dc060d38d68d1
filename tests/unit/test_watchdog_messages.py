"""What the watchdog's heartbeats cost: per interval every rank sends rank 0 one small message
(its host, phase, counters, step and place) and rank 0 answers each rank with one small message
(its own heartbeat), never the table of all ranks, so rank 0's work is O(P) and every other
rank's O(1); rank 0 alone decides who stalled. A stand-in communicator records what each rank
sends; the live runs are in tests/test_signals.py and tests/test_cli_two_nodes_cluster.py."""
import pickle

import pytest

from distnet.comm import phase
from distnet.comm.watchdog import Watchdog


class _Message:
    """A probed heartbeat: its payload names its sender."""

    def __init__(self, sender, payload):
        assert payload["rank"] == sender
        self.payload = payload

    def recv(self):
        return self.payload


class _Done:
    def Test(self):
        return True


class _Comm:
    """Rank ``rank`` of ``size``; ``inbox``: ``(sender, payload)`` waiting for it."""

    def __init__(self, rank, size, inbox=()):
        self.rank, self.size = rank, size
        self.inbox = list(inbox)
        self.sent = []

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.size

    def Dup(self):
        return self

    def gather(self, obj, root):
        """Rank 0 learns every rank's host: four ranks per node."""
        return [f"node{r // 4}" for r in range(self.size)] if self.rank == root else None

    def improbe(self, tag):
        return _Message(*self.inbox.pop(0)) if self.inbox else None

    def isend(self, obj, dest, tag):
        self.sent.append((dest, obj))
        return _Done()


def _beat(rank, step=7, where=(1, 3), place="distnet/comm/reduce.py:40 (allreduce)", in_comm=True):
    """Rank ``rank``'s heartbeat in training (one phase entered, as rank 0's below)."""
    return {"rank": rank, "host": f"node{rank // 4}", "phase": "training", "entered": 1, "ticks": step,
            "step": step, "where": where, "place": place, "in_comm": in_comm}


@pytest.fixture
def training():
    phase.reset()
    phase.enter("training")
    yield
    phase.reset()


def test_rank_0_answers_each_rank_with_one_small_message(training):
    P = 1000
    behind = dict(step=6, where=(1, 2), place="distnet/ops/conv.py:88 (fprop)", in_comm=False)
    inbox = [(r, _beat(r, **(behind if r == 345 else {}))) for r in range(1, P)]
    comm = _Comm(0, P, inbox)
    dog = Watchdog(comm, 30, clock=lambda: 100.0)
    dog.step, dog.where = 7, (1, 3)
    dog._exchange(100.0)
    assert sorted(dest for dest, _ in comm.sent) == list(range(1, P))
    assert all(obj["rank"] == 0 and obj["phase"] == "training" for _, obj in comm.sent)
    assert max(len(pickle.dumps(obj)) for _, obj in comm.sent) < 400
    assert dog.verdict(120.0) is None
    comm.inbox, comm.sent = list(inbox), []          # the same heartbeats again: nobody moved
    dog._exchange(131.0)
    assert len(comm.sent) == P - 1
    message, about = dog.verdict(131.0)
    assert message.startswith("watchdog: no progress for 31 s (limit 30 s) in training at epoch 1, batch 3; "
                              "stalled: rank 345 on node86 (at step 6, epoch 1, batch 2, while others reached "
                              "step 7; in distnet/ops/conv.py:88 (fprop))"), message
    assert about == {"rank": 345, "host": "node86", "phase": "training"}


def test_another_rank_sends_one_heartbeat_and_keeps_no_table(training):
    comm = _Comm(5, 1000, [(0, _beat(0))])
    dog = Watchdog(comm, 30, clock=lambda: 0.0)
    assert len(dog.heard) == 1 and len(dog.state) == 1          # rank 0's only, not all 1000
    dog.progress(1, 3)
    dog._exchange(1.0)
    (dest, state), = comm.sent
    assert (dest, state["rank"], state["step"], state["where"]) == (0, 5, 1, (1, 3))
    assert dog.verdict(30.0) is None                             # rank 0 heard from at 1 s
    message, about = dog.verdict(40.0)
    assert message.endswith("; stalled: rank 0 on node0 (no heartbeat for 39 s: stopped, lost, or hung outside Python)")
    assert about == {"rank": 0, "host": "node0", "phase": "training"}
