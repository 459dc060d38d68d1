"""``Seq2SeqExperiment``: trains a :class:`~distnet.models.seq2seq.Seq2Seq` on a
:class:`~distnet.datasets.sequences.SequenceDataset`, on one process or on ``data x pipe``
ranks (``pipe: 2`` puts the encoder and the decoder on two stages)."""
import logging
import time

from ..backend import Numpy
from ..errors import ConfigError
from ..log import get_logger, setup_logging
from .fit import RunHooks, RunResult, launcher_size
from .threads import setup_threads


class Seq2SeqExperiment:
    """Keys: ``model`` (Seq2Seq), ``datasets`` (a list with one SequenceDataset), ``backend`` (default numpy
    float32, seed 0), ``data`` (data replicas, default 1), ``pipe`` (1, or 2: encoder and decoder
    on their own stages), ``eval_every`` (N: measure the test accuracies every N epochs; default
    0 = only at the end), ``logging`` (``level``, ``format``, ``filename``). The run reports
    ``test_misclass`` = 100 - whole-sequence accuracy of the test split (greedy decoding)."""

    config_types = {"model": ("obj", "model"), "datasets": ("list", ("obj", "dataset")), "backend": ("obj", "backend"),
                    "data": int, "pipe": int, "eval_every": int, "logging": dict}
    config_notes = ()
    dist_flag = False
    #: No checkpoints yet (the command line's checkpoint options set these and nothing reads them).
    checkpoint_path, checkpoint_every = None, 0
    #: No watchdog key (``distnet run --watchdog`` works as for any experiment).
    watchdog = None

    def __init__(self, model, datasets, backend=None, data=1, pipe=1, eval_every=0, logging=None):
        if len(datasets) != 1:
            raise ConfigError(f"give exactly one dataset (got {len(datasets)})", key="datasets")
        dataset = datasets[0]
        if type(model).__name__ != "Seq2Seq":
            raise ConfigError(f"Seq2SeqExperiment trains a Seq2Seq model, got {type(model).__name__}", key="model")
        if type(dataset).__name__ != "SequenceDataset":
            raise ConfigError(f"Seq2SeqExperiment takes a SequenceDataset, got {type(dataset).__name__}",
                              key="datasets")
        for k, v in (("data", data), ("pipe", pipe)):
            if v < 1:
                raise ConfigError(f"{k} must be >= 1, got {v}", key=k)
        if eval_every < 0:
            raise ConfigError(f"eval_every must be >= 0, got {eval_every}", key="eval_every")
        self.model, self.dataset = model, dataset
        self.backend = backend if backend is not None else Numpy()
        self.data, self.pipe, self.eval_every = data, pipe, eval_every
        self.logging = logging or {}
        self.config_record = None

    def check(self):
        """Keys that need no MPI: the model's stages against ``pipe``."""
        self.model.check_stages(self.pipe)

    def summary(self):
        """Lines for ``distnet check``: the data (loaded and checked) and the two halves."""
        d = self.dataset.load()
        m = self.model
        (src, _, tgt, _) = d["train"]
        return [f"seq2seq, {len(src)} train / {len(d.get('test', [[]])[0])} test sequences, source "
                f"<= {src.shape[1]} tokens of {len(self.dataset.src_vocab)}, target <= {tgt.shape[1]} "
                f"tokens of {len(self.dataset.tgt_vocab)}",
                f"encoder: embedding {m.E}, LSTM {m.L} x {m.H}" +
                (f", stage {m.encoder_stage}" if self.pipe > 1 else ""),
                f"decoder: embedding {m.E}, LSTM {m.L} x {m.H}, linear {m.H} -> "
                f"{len(self.dataset.tgt_vocab)}, softmax cross-entropy" +
                (f", stage {m.decoder_stage}" if self.pipe > 1 else "")]

    def layout(self, nranks, image_shape=None):
        """How ``nranks`` ranks run it (the one grid resolver): ``data x pipe`` ranks, no grid."""
        from ..geometry.grid import resolve_layout
        self.check()
        return resolve_layout(nranks, data=self.data, pipe=self.pipe)

    def make_topology(self):
        from ..comm.topology import Topology
        if self.data == 1 and self.pipe == 1:
            self.layout(launcher_size())     # refuses a launch on several ranks
            return Topology.serial()
        world = Topology.world_comm()
        return Topology.from_layout(self.layout(world.Get_size()), world)

    def run(self, topology=None, on_epoch=None, hooks=None, resume=None):
        """Train and evaluate; returns a :class:`~distnet.experiments.fit.RunResult` (its
        ``accuracy`` attribute: the final test token / sequence accuracies)."""
        if resume is not None:
            raise ConfigError("Seq2SeqExperiment does not resume from checkpoints yet", key="checkpoint")
        hooks = hooks or RunHooks()
        clock = time.perf_counter
        t0 = clock()
        self.check()
        t = self.topology = topology or self.make_topology()
        self.thread_plan = setup_threads(t.world, self.backend)   # each rank's share of its node
        lc = dict(self.logging)
        setup_logging(t.rank, t.size, lc.get("level", logging.INFO), lc.get("format"), lc.get("filename"))
        data = self.dataset.load()
        m = self.model
        m.configure(self.backend, t, len(self.dataset.src_vocab), len(self.dataset.tgt_vocab))
        log = get_logger()
        log.info("distnet seq2seq: %d rank(s)%s%s, backend %s, %d train / %d test sequences", t.size,
                 f", data {t.ndata}" if t.ndata > 1 else "", f", pipe {t.npipe} (encoder stage "
                 f"{m.encoder_stage}, decoder stage {m.decoder_stage})" if t.npipe > 1 else "",
                 self.backend, len(data["train"][0]), len(data.get("test", [[]])[0]))
        hooks.started(self, t)
        timings = {"setup": clock() - t0, "train": 0.0, "eval": 0.0}
        costs = []
        acc = (None, None)
        for epoch in range(m.num_epochs):
            te = clock()
            cost = m.fit_epoch(data["train"], epoch, hooks.batch)
            secs = clock() - te
            timings["train"] += secs
            costs.append(cost)
            record = {"epoch": epoch, "cost": cost, "seconds": secs}
            last = epoch == m.num_epochs - 1
            if "test" in data and (last or (self.eval_every and (epoch + 1) % self.eval_every == 0)):
                tv = clock()
                acc = m.evaluate(data["test"])
                timings["eval"] += clock() - tv
                record["test_token_acc"], record["test_seq_acc"] = acc
                record["test_misclass"] = 100 - acc[1]
            log.info("epoch %d: cost %.6f (%.1f s)%s", epoch, cost, secs,
                     f", test token accuracy {acc[0]:.2f}%, sequence accuracy {acc[1]:.2f}%"
                     if "test_seq_acc" in record else "")
            hooks.epoch(record)
            if on_epoch is not None:
                on_epoch(epoch, cost)
        timings["total"] = clock() - t0
        result = RunResult(epoch_costs=costs, test_misclass=None if acc[1] is None else 100 - acc[1],
                           size=t.size, timings=timings)
        result.accuracy = acc
        hooks.finished(result)
        return result
