"""What the watchdog's heartbeats cost: per interval rank 0 hears one small message from each
rank and answers each with one small message (its verdict only to a rank that asks), never the
table of all ranks, so rank 0's work is O(P) and every other rank's O(1). A stand-in
communicator records what each rank sends; the live runs are in tests/test_signals.py."""
import pickle

from distnet.comm.watchdog import Watchdog


class _Message:
    def __init__(self, sender, payload):
        self.item = (sender, payload)

    def recv(self):
        return self.item


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

    def improbe(self, tag):
        return _Message(*self.inbox.pop(0)) if self.inbox else None

    def isend(self, obj, dest, tag):
        self.sent.append((dest, obj))
        return _Done()


WAITING = (7, (1, 3), "distnet/comm/reduce.py:40 (allreduce)", True)


def test_rank_0_answers_each_rank_with_one_small_message():
    P = 1000
    behind = (6, (1, 2), "distnet/ops/conv.py:88 (fprop)", False)
    inbox = [(r, ("late" if r == 7 else "ok", behind if r == 345 else WAITING)) for r in range(1, P)]
    comm = _Comm(0, P, inbox)
    dog = Watchdog(comm, 30, clock=lambda: 100.0)
    dog.step, dog.where = 7, (1, 3)
    dog._exchange(100.0)
    assert sorted(dest for dest, _ in comm.sent) == list(range(1, P))
    answers = dict(comm.sent)
    assert all(answers[r] == (0, None) for r in range(1, P) if r != 7)
    assert answers[7][1].startswith("rank 345 (at step 6, epoch 1, batch 2, while others reached step 7")
    assert max(len(pickle.dumps(obj)) for _, obj in comm.sent) < 400


def test_another_rank_sends_one_heartbeat_and_keeps_no_table():
    comm = _Comm(5, 1000, [(0, "rank 345 (at step 6 ...)")])
    clock = [0.0]
    dog = Watchdog(comm, 30, clock=lambda: clock[0])
    assert len(dog.heard) == 2 and len(dog.state) == 2          # rank 0 and itself, not all 1000
    dog.progress(1, 3)
    clock[0] = 40.0
    dog._exchange(40.0)
    (dest, (sender, (flag, state))), = comm.sent
    assert (dest, sender, flag) == (0, 5, "late") and state[0] == 1
    assert dog.diagnosis(40.0).endswith("; stalled: rank 345 (at step 6 ...)")
