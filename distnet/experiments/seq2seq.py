"""``Seq2SeqExperiment``: trains a :class:`~distnet.models.seq2seq.Seq2Seq` on a
:class:`~distnet.datasets.sequences.SequenceDataset`, on one process or on ``data x pipe``
ranks (``pipe: 2`` puts the encoder and the decoder on two stages)."""
import os
import time

from ..backend import Numpy, under_seterr_handling
from ..config.types import NonNegativeInt, PositiveInt
from ..errors import ConfigError
from ..log import check_logging, get_logger
from .fit import (RunHooks, RunResult, _check_checkpoint_key, epochs_left, launcher_size,
                  setup_experiment_logging)
from ..ops.threads import KERNEL_VAR, THREAD_VARS, ThreadPlan, apply_plan
from .threads import plan_threads


def _set(value):
    """Whether a thread variable's value names a count (``"4"``, ``"4,2"``), as
    :mod:`distnet.ops.threads` reads them."""
    head = str(value).split(",")[0].strip()
    return head.isdigit() and int(head) >= 1


class Seq2SeqExperiment:
    """Keys: ``model`` (Seq2Seq), ``datasets`` (a list with one SequenceDataset), ``backend`` (default numpy
    float32, seed 0), ``data`` (data replicas, default 1), ``pipe`` (1, or 2: encoder and decoder
    on their own stages), ``eval_every`` (N: measure the test accuracies every N epochs; default
    0 = only at the end), ``logging`` (``level``, ``format``, ``filename``), ``checkpoint``
    (as for FitExperiment: ``every`` N epochs, ``path``, ``at_end``; ``distnet run --resume``
    continues from one on any layout). The run reports ``test_misclass`` = 100 - whole-sequence
    accuracy of the test split (greedy decoding)."""

    config_types = {"model": ("obj", "model"), "datasets": ("list", ("obj", "dataset")), "backend": ("obj", "backend"),
                    "data": PositiveInt, "pipe": PositiveInt, "eval_every": NonNegativeInt, "logging": dict,
                    "checkpoint": dict}
    config_notes = ()
    dist_flag = False
    #: No watchdog key (``distnet run --watchdog`` works as for any experiment).
    watchdog = None

    def __init__(self, model, datasets, backend=None, data=1, pipe=1, eval_every=0, logging=None,
                 checkpoint=None):
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
        self.logging = check_logging(logging)
        ck = _check_checkpoint_key(checkpoint)
        #: Write a checkpoint every this many epochs (0: only at the end); the CLI may change it.
        self.checkpoint_every = ck.get("every", 0)
        #: Where checkpoints go (None: nowhere, unless the CLI gives its run directory's).
        self.checkpoint_path = ck.get("path")
        self.checkpoint_at_end = ck.get("at_end", True)
        #: ``{source, yaml, resolved, overrides}`` stored in checkpoints (the CLI sets it).
        self.config_record = None

    def build_notes(self):
        """Notes about keys the model does not use, for :attr:`config_notes`."""
        return self.model.notes()

    def check(self):
        """What needs no MPI: the model's stages against ``pipe``, the data against its declared
        maxima and vocabularies (located errors; every rank finds the same before any
        collective)."""
        self.model.check_stages(self.pipe)
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
        return lines

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

    def plan_threads(self, world, env=None):
        """The run's thread plan (:func:`~distnet.experiments.threads.plan_threads`),
        except that without a choice of the user (the backend key ``threads``, a BLAS thread
        variable such as ``OPENBLAS_NUM_THREADS``) every rank runs ONE BLAS thread: the model's
        products, ``(b, E or H) x (E or H, 4H)`` per time step, are far too small for BLAS threads
        to pay, and on a busy machine spinning BLAS threads made an epoch of the shipped task
        10-20x slower (README "Model parallelism"). Not applied. Collective over ``world``."""
        env = os.environ if env is None else env
        plan = plan_threads(world, self.backend, env)
        if self.backend.threads is None and not any(_set(env.get(v, "")) for v in THREAD_VARS):
            plan = ThreadPlan(1, plan.kernel if _set(env.get(KERNEL_VAR, "")) else 1,
                              f"1 for seq2seq's small matrices; {plan.source}")
        return plan

    def setup(self, topology=None):
        """Topology, thread plan, logging, data and weights; returns the loaded data."""
        self.check()
        t = self.topology = topology or self.make_topology()
        self.thread_plan = apply_plan(self.plan_threads(t.world))
        if self.backend.name != "numpy":  # ranks of one node use distinct GPUs
            self.backend.bind_device(t.local_rank())
        setup_experiment_logging(self, t)
        data = self.dataset.load()
        self.model.configure(self.backend, t, len(self.dataset.src_vocab), len(self.dataset.tgt_vocab))
        return data

    def save_checkpoint(self, path, epoch, history=()):
        """Write the model's state after ``epoch`` to ``path`` (collective, world rank 0 writes;
        never a checkpoint of non-finite weights)."""
        from ..models.checkpoint import save_checkpoint
        from ..models.finite import check_parameters
        check_parameters(self.model, f"at the end of epoch {epoch}; no checkpoint written to {path}")
        save_checkpoint(path, self.model, self.topology, epoch, self.config_record, history)

    def restore(self, path):
        """Load the checkpoint ``path`` into the configured model (any layout wrote it);
        returns the :class:`~distnet.models.checkpoint.Checkpoint`. Collective."""
        from ..models.checkpoint import restore_checkpoint
        return restore_checkpoint(self.model, path, self.topology, get_logger())

    @under_seterr_handling
    def evaluate_checkpoint(self, path, topology=None):
        """Token and sequence accuracies (percent) of every split with the weights of the
        checkpoint ``path``: ``(checkpoint, {split: (token %, sequence %, sequences)})``, the
        same on every rank. Collective over the run's world."""
        data = self.setup(topology)
        ck = self.restore(path)
        self.model.resume = None
        return ck, {split: self.model.evaluate(d) + (len(d[0]),) for split, d in data.items()}

    @under_seterr_handling
    def run(self, topology=None, on_epoch=None, hooks=None, resume=None):
        """Train and evaluate; returns a :class:`~distnet.experiments.fit.RunResult` (its
        ``accuracy`` attribute: the final test token / sequence accuracies). ``resume``: a
        checkpoint to continue from (written on any layout: 1 process, pipe 2, data replicas)."""
        hooks = hooks or RunHooks()
        clock = time.perf_counter
        t0 = clock()
        data = self.setup(topology)
        t, m = self.topology, self.model
        log = get_logger()
        log.info("distnet seq2seq: %d rank(s)%s%s, backend %s, %s, %d train / %d test sequences", t.size,
                 f", data {t.ndata}" if t.ndata > 1 else "", f", pipe {t.npipe} (encoder stage "
                 f"{m.encoder_stage}, decoder stage {m.decoder_stage})" if t.npipe > 1 else "",
                 self.backend, self.thread_plan.describe(), len(data["train"][0]), len(data.get("test", [[]])[0]))
        for level, note in self.config_notes if t.rank == 0 else ():   # about the file every rank
            log.log(level, "%s", note)                                   # reads: said once
        hooks.started(self, t)
        timings = {"setup": clock() - t0, "train": 0.0, "eval": 0.0}
        result = RunResult(size=t.size)
        history, start = [], 0
        if resume:
            tr = clock()
            ck = self.restore(resume)
            timings["restore"] = clock() - tr
            history = [r for r in ck.history if r.get("epoch", -1) <= ck.epoch]
            start = result.start_epoch = ck.epoch + 1
            for r in history:   # the run's records start at epoch 0, as an uninterrupted run's
                hooks.epoch(dict(r, from_checkpoint=True))
            log.info("resumed from %s: epoch %d done (written on %s rank(s)); %s",
                     resume, ck.epoch, ck.meta.get("size", "?"), epochs_left(ck.epoch, m.num_epochs))
        acc = (None, None)
        for r in history:
            if "test_seq_acc" in r:
                acc = (r["test_token_acc"], r["test_seq_acc"])
        for epoch in range(start, m.num_epochs):
            te = clock()
            cost = m.fit_epoch(data["train"], epoch, hooks.batch)
            secs = clock() - te
            timings["train"] += secs
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
            history.append(record)
            if (self.checkpoint_path and self.checkpoint_every and (epoch + 1) % self.checkpoint_every == 0
                    and not (last and self.checkpoint_at_end)):
                tc = clock()
                self.save_checkpoint(self.checkpoint_path, epoch, history)
                record["checkpoint_seconds"] = clock() - tc
                result.checkpoint = self.checkpoint_path
            hooks.epoch(record)
            if on_epoch is not None:
                on_epoch(epoch, cost)
        hooks.trained()
        if self.checkpoint_path and self.checkpoint_at_end and history and start < m.num_epochs:
            self.save_checkpoint(self.checkpoint_path, history[-1]["epoch"], history)
            result.checkpoint = self.checkpoint_path
        timings["total"] = clock() - t0
        result.epoch_costs = [r["cost"] for r in history]
        result.test_misclass = None if acc[1] is None else 100 - acc[1]
        result.timings = timings
        result.accuracy = acc
        hooks.finished(result)
        return result
