"""``Seq2SeqExperiment``: trains a :class:`~distnet.models.seq2seq.Seq2Seq` on a
:class:`~distnet.datasets.sequences.SequenceDataset`, on one process or on ``data x pipe``
ranks (``pipe: 2`` puts the encoder and the decoder on two stages)."""
import os

from ..backend import Numpy, under_seterr_handling
from ..config.builder import config_name
from ..config.types import NonNegativeInt, Positive, PositiveInt
from ..datasets.sequences import SequenceDataset
from ..errors import ConfigError
from ..models.seq2seq import Seq2Seq
from ..ops.threads import KERNEL_VAR, THREAD_VARS, ThreadPlan, apply_plan
from .base import Experiment, setup_experiment_logging
from .threads import plan_threads


def _set(value):
    """Whether a thread variable's value names a count (``"4"``, ``"4,2"``), as
    :mod:`distnet.ops.threads` reads them."""
    head = str(value).split(",")[0].strip()
    return head.isdigit() and int(head) >= 1


class Seq2SeqExperiment(Experiment):
    """Keys: ``model`` (Seq2Seq), ``datasets`` (a list with one SequenceDataset), ``backend`` (default numpy
    float32, seed 0), ``data`` (data replicas, default 1), ``pipe`` (1, or 2: encoder and decoder
    on their own stages), ``eval_every`` (N: measure the test accuracies every N epochs; default
    0 = only at the end), ``logging`` (``level``, ``format``, ``filename``), ``checkpoint``
    (as for FitExperiment: ``every`` N epochs, ``path``, ``at_end``, ``sharded``, ``enabled``;
    ``distnet run --resume`` continues from one on any layout), ``watchdog`` and ``tensorboard``
    (as for FitExperiment). The run reports ``test_misclass`` = 100 - whole-sequence
    accuracy of the test split (greedy decoding)."""

    config_types = {"model": ("obj", "model"), "datasets": ("list", ("obj", "dataset")), "backend": ("obj", "backend"),
                    "data": PositiveInt, "pipe": PositiveInt, "eval_every": NonNegativeInt, "logging": dict,
                    "checkpoint": dict, "watchdog": Positive, "tensorboard": bool}
    #: No best epoch: the epoch lines show the accuracies.
    picks_best_epoch = False
    def __init__(self, model, datasets, backend=None, data=1, pipe=1, eval_every=0, logging=None,
                 checkpoint=None, watchdog=None, tensorboard=False):
        if len(datasets) != 1:
            raise ConfigError(f"give exactly one dataset (got {len(datasets)})", key="datasets")
        dataset = datasets[0]
        if not isinstance(model, Seq2Seq):
            raise ConfigError(f"Seq2SeqExperiment trains a Seq2Seq model, got {config_name(model)}", key="model")
        if not isinstance(dataset, SequenceDataset):
            raise ConfigError(f"Seq2SeqExperiment takes a SequenceDataset, got {type(dataset).__name__}",
                              key="datasets")
        for k, v in (("data", data), ("pipe", pipe)):
            if v < 1:
                raise ConfigError(f"{k} must be >= 1, got {v}", key=k)
        self.model, self.dataset = model, dataset
        self.backend = backend if backend is not None else Numpy()
        self.data, self.pipe = data, pipe
        self._run_keys(logging, checkpoint, eval_every, watchdog, tensorboard)

    def check(self):
        """What needs no MPI: the model's stages against ``pipe``, the data against its declared
        maxima and vocabularies (located errors; every rank finds the same before any
        collective)."""
        self.model.check_stages(self.pipe)
        self.check_monitor()
        self.dataset.load()

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

    def show_lines(self, nranks):
        """``distnet show -n N``: the layout of ``nranks`` ranks and the parameters each stage
        holds (no MPI, no training)."""
        lay = self.layout(nranks)
        m, Vs, Vt = self.model, len(self.dataset.src_vocab), len(self.dataset.tgt_vocab)
        E, H, L = m.E, m.H, m.L
        stack = sum(4 * H * ((E if k == 0 else H) + H + 1) for k in range(L))
        enc, dec = Vs * E + stack, Vt * E + stack + Vt * H + Vt
        lines = [f"{nranks} rank(s): data {lay.data} x pipe {lay.pipe}"] + self.summary()
        if lay.pipe == 2:
            lines += [f"stage {m.encoder_stage}: encoder, {enc} parameters; stage {m.decoder_stage}: decoder, "
                      f"{dec} parameters; per minibatch one message of the states (2 x {L} x b x {H}) "
                      "each way"]
        else:
            lines += [f"every rank: encoder and decoder, {enc + dec} parameters"]
        return lines + m.describe_learning_rates()

    def layout(self, nranks, image_shape=None):
        """How ``nranks`` ranks run it (the one grid resolver): ``data x pipe`` ranks, no grid."""
        from ..geometry.grid import resolve_layout
        self.check()
        return resolve_layout(nranks, data=self.data, pipe=self.pipe)

    def plan_threads(self, world, env=None):
        """The run's thread plan (:func:`~distnet.experiments.threads.plan_threads`),
        except that without a choice of the user (the backend key ``threads``, a BLAS thread
        variable such as ``OPENBLAS_NUM_THREADS``) every rank runs ONE BLAS thread: the model's
        products, ``(b, E or H) x (E or H, 4H)`` per time step, are far too small for BLAS threads
        to pay, and on a busy machine spinning BLAS threads made an epoch of the shipped task
        10-20x slower (docs/parallelism.md#seq2seq-across-ranks). Not applied. Collective over ``world``."""
        env = os.environ if env is None else env
        plan = plan_threads(world, self.backend, env)
        if self.backend.threads is None and not any(_set(env.get(v, "")) for v in THREAD_VARS):
            plan = ThreadPlan(1, plan.kernel if _set(env.get(KERNEL_VAR, "")) else 1,
                              f"1 for seq2seq's small matrices; {plan.source}")
        return plan

    def setup(self, topology=None):
        """Topology, thread plan, logging and weights; returns the topology."""
        self.check()
        t = self.topology = topology or self.make_topology()
        self.dataset.check_same_data(t.world)   # node-local copies of the data file must agree
        self.thread_plan = apply_plan(self.plan_threads(t.world))
        if self.backend.name != "numpy":  # ranks of one node use distinct GPUs
            self.backend.bind_device(t.local_rank())
        setup_experiment_logging(self, t)
        self.model.configure(self.backend, t, len(self.dataset.src_vocab), len(self.dataset.tgt_vocab))
        return t

    def load_data(self):
        """``{split: (src, src_len, tgt, tgt_len)}``, the same on every rank (read by
        :meth:`check`)."""
        return self.dataset.load()

    @under_seterr_handling
    def evaluate_checkpoint(self, path, topology=None):
        """Token and sequence accuracies (percent) of every split with the weights of the
        checkpoint ``path``: ``(checkpoint, {split: (token %, sequence %, sequences)})``, the
        same on every rank. Collective over the run's world."""
        self.setup(topology)
        ck = self.restore(path)
        return ck, {split: self.model.evaluate(d) + (len(d[0]),) for split, d in self.load_data().items()}

    # -- the training loop's questions (distnet.experiments.loop) ------------------------------
    def log_start(self, log):
        """The run's first line (layout, stages, backend, threads, data) and the notes about
        the file (rank 0: every rank reads the same file)."""
        t, m, data = self.topology, self.model, self.load_data()
        log.info("distnet seq2seq: %d rank(s)%s%s, backend %s, %s, %d train / %d test sequences", t.size,
                 f", data {t.ndata}" if t.ndata > 1 else "", f", pipe {t.npipe} (encoder stage "
                 f"{m.encoder_stage}, decoder stage {m.decoder_stage})" if t.npipe > 1 else "",
                 self.backend, self.thread_plan.describe(), len(data["train"][0]), len(data.get("test", [[]])[0]))
        for level, note in self.config_notes if t.rank == 0 else ():
            log.log(level, "%s", note)

    def eval_splits(self):
        """The test split's accuracies are measured every ``eval_every`` epochs and after the last."""
        return ("test",)

    def evaluates(self, epoch):
        return epoch == self.model.num_epochs - 1 or super().evaluates(epoch)

    def log_epoch(self, record, log):
        """``epoch N: cost C (S s)``, with the test accuracies when measured."""
        log.info("epoch %d: cost %.6f (%.1f s)%s", record["epoch"], record["cost"], record["seconds"],
                 f", test token accuracy {record['test_token_acc']:.2f}%, sequence accuracy "
                 f"{record['test_seq_acc']:.2f}%" if "test_seq_acc" in record else "")

    def final_metrics(self, data, history, result, log):
        """The last measured test accuracies (this run's or the checkpoint's): ``result.accuracy``
        ``(token %, sequence %)`` (None, None without any) and ``test_misclass``."""
        acc = (None, None)
        for r in history:
            if "test_seq_acc" in r:
                acc = (r["test_token_acc"], r["test_seq_acc"])
        result.test_misclass = None if acc[1] is None else 100 - acc[1]
        result.accuracy = acc
