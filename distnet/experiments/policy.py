"""The checkpoint policy of a run: where each checkpoint goes (``{epoch}`` in the path), the
best epoch by a monitored metric (and its checkpoint), the last ``keep_last`` checkpoints, and
early stopping with ``patience`` and ``min_delta``.

Keys of the experiment's ``checkpoint`` mapping (beside ``every``, ``path``, ``at_end``):

* ``monitor``: the metric that picks the best epoch, a field of the evaluated epochs' records
  (``valid_misclass`` by default; ``valid_cost``, ``valid_top5_misclass``, ``valid_macro_f1``, a
  per-pixel model's ``valid_miou``, ...: :data:`METRICS`). Lower is better, except for accuracies,
  scores and overlaps (:data:`METRICS` says which). ``distnet check`` checks the name against
  what the run records (:func:`check_monitor`). A metric of the test split is refused unless
  ``select_on_test: true``: the test split reports the final result, choosing by it tunes on it;
* ``keep_best``: also write the best epoch's checkpoint (the path with its ``{epoch}`` field as
  ``best``, else ``-best`` before the extension: ``checkpoint-best.h5``);
* ``keep_last``: keep only the last N checkpoints of the path (which must hold ``{epoch}``); an
  older one is removed only after the newer one is completely written;
* ``patience`` (evaluations without an improvement of more than ``min_delta``; 0: never stop
  early) and ``min_delta`` (default 0).

The policy's decisions are written into the epoch records (``checkpoint``, ``removed``,
``best``, ``best_checkpoint``, ``since_best``, ``stop``; ``midway_checkpoint``: one written
inside the epoch), which checkpoints keep: a resumed run
replays them (:meth:`CheckpointPolicy.replay`) and so decides as the uninterrupted run would.
Every rank makes the same decisions from the same records; world rank 0 removes the files.
"""
import os
import string

from ..errors import ConfigError

POLICY_KEYS = {"monitor", "keep_best", "keep_last", "patience", "min_delta", "select_on_test"}
SPLITS = ("valid", "train", "test")
#: The one-number metrics of the evaluated splits (``<split>_<metric>``; also
#: ``top<k>_misclass``), each with True where a larger value is better (accuracies, scores,
#: overlaps) and False where a smaller one is (costs, error rates), and who measures it.
METRICS = {"cost": (False, "every model"), "misclass": (False, "classifiers"),
           "pixel_acc": (True, "per-pixel models"), "miou": (True, "per-pixel models"),
           "dice": (True, "per-pixel models"), "reconstruction": (False, "RBM, DBN, Autoencoder"),
           "token_acc": (True, "Seq2Seq"), "seq_acc": (True, "Seq2Seq"),
           "macro_precision": (True, "classifiers"), "macro_recall": (True, "classifiers"),
           "macro_f1": (True, "classifiers"), "mse": (False, "regressions"), "mae": (False, "regressions")}
#: Fields of the records that hold a list per class (or a matrix), not one number.
PER_CLASS = ("class_accuracy", "confusion", "class_iou", "class_dice")


def monitor_problem(monitor):
    """Why ``monitor`` (``<split>_<metric>``) cannot select, from its spelling alone (None: it
    may); whether the run records it is :func:`check_monitor`'s question, asked when the
    experiment knows its model and data."""
    if not isinstance(monitor, str) or not monitor.startswith(tuple(s + "_" for s in SPLITS)):
        return f"must name a metric of an evaluated split (valid_misclass, valid_cost, ...), got {monitor!r}"
    metric = monitor.split("_", 1)[1]
    if metric in PER_CLASS:
        return f"{monitor} holds a value per class; monitor one number ({', '.join(METRICS)}, top<k>_misclass)"
    return None


def higher_is_better(monitor):
    """Whether a larger value of the metric ``monitor`` is better (:data:`METRICS`)."""
    return METRICS.get(monitor.split("_", 1)[1], (False,))[0]


def path_fields(path):
    """The replacement fields of a checkpoint path (``["epoch"]`` for ``ck_{epoch:03d}.h5``);
    ConfigError for a malformed one or another field than ``epoch``."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(path) if f is not None]
    except ValueError as e:
        raise ConfigError(f"checkpoint path {path!r}: {e} (write {{{{ and }}}} for a literal brace)",
                          key="checkpoint") from None
    other = sorted({f for f in fields if f != "epoch"})
    if other:
        raise ConfigError(f"checkpoint path {path!r} names {', '.join('{' + f + '}' for f in other)}; only "
                          "{epoch} (the epoch number, e.g. {epoch:03d}) is expanded", key="checkpoint")
    return fields


def checkpoint_file(path, epoch):
    """``path`` with ``{epoch}`` expanded to ``epoch`` (a path without fields is itself)."""
    if not path_fields(path):
        return path
    try:
        return path.format(epoch=epoch)
    except (ValueError, TypeError) as e:   # a format spec that does not suit an int: {epoch:s}
        raise ConfigError(f"checkpoint path {path!r}: {e}", key="checkpoint") from None


def best_file(path):
    """Where ``keep_best`` writes: ``{epoch}`` (every field) as ``best``, else ``-best`` before
    the extension (``checkpoint.h5`` -> ``checkpoint-best.h5``)."""
    if path_fields(path):
        out = "".join(lit + ("best" if field is not None else "")
                      for lit, field, _, _ in string.Formatter().parse(path))
        return out
    root, ext = os.path.splitext(path)
    return f"{root}-best{ext}"


def check_policy_keys(value):
    """The policy keys of a ``checkpoint`` mapping checked (ConfigError at ``checkpoint``)."""
    def bad(message):
        return ConfigError(f"checkpoint {message}", key="checkpoint")
    monitor = value.get("monitor")
    problem = monitor_problem(monitor) if monitor is not None else None
    if problem is not None:
        raise bad(f"monitor {problem}")
    for key in ("keep_best", "select_on_test"):
        if not isinstance(value.get(key, False), bool):
            raise bad(f"{key} must be True or False, got {value[key]!r}")
    for key in ("keep_last", "patience"):
        v = value.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise bad(f"{key} must be an integer >= 0 (0: {'keep all' if key == 'keep_last' else 'never stop early'}), got {v!r}")
    d = value.get("min_delta", 0)
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not d >= 0 or d == float("inf"):
        raise bad(f"min_delta must be a number >= 0, got {d!r}")
    if monitor is not None and monitor.startswith("test_") and not value.get("select_on_test", False):
        raise bad(f"monitor {monitor} selects on the test split, whose error rate then no longer measures an "
                  "unseen split; monitor a validation metric (valid_...), or set checkpoint select_on_test: true "
                  "to select on the test split anyway")
    path = value.get("path")
    if isinstance(path, str) and path:
        fields = path_fields(path)
        if value.get("keep_last", 0) and not fields:
            raise bad(f"keep_last needs {{epoch}} in the checkpoint path (each checkpoint replaces the "
                      f"last one at {path}), e.g. path: ck_{{epoch}}.h5")


def check_monitor(keys, splits, names):
    """ConfigError (at ``checkpoint``) unless the ``monitor`` of the ``checkpoint`` mapping
    ``keys`` is ``<split>_<metric>`` of a split the run evaluates (``splits``) and a metric its
    evaluations record (``names``: the one-number ones): found before any data is read, not
    after an epoch of training."""
    monitor = keys.get("monitor")
    if monitor is None:
        return
    split, _, metric = monitor.partition("_")
    if split not in splits:
        raise ConfigError(f"checkpoint monitor {monitor}: the run evaluates no {split} split (it evaluates: "
                          f"{', '.join(splits) or 'none'})", key="checkpoint")
    if metric not in names:
        raise ConfigError(f"checkpoint monitor {monitor}: the evaluations record no {metric!r} of the {split} split; "
                          f"a monitor names one of {', '.join(f'{split}_{n}' for n in names)}", key="checkpoint")


class CheckpointPolicy:
    """One run's policy (built by :meth:`of` on every rank; every rank decides the same)."""

    def __init__(self, path=None, every=0, at_end=True, monitor=None, keep_best=False, keep_last=0,
                 patience=0, min_delta=0.0, world_rank=0):
        self.path, self.every, self.at_end = path, every, at_end
        self.monitor, self.keep_best, self.keep_last = monitor, keep_best, keep_last
        self.patience, self.min_delta = patience, float(min_delta)
        self.world_rank = world_rank
        if keep_last and path and not path_fields(path):
            raise ConfigError(f"checkpoint keep_last needs {{epoch}} in the checkpoint path (each checkpoint "
                              f"replaces the last one at {path}), e.g. --checkpoint 'ck_{{epoch}}.h5'",
                              key="checkpoint")
        self.higher_is_better = bool(monitor) and higher_is_better(monitor)
        #: ``{"epoch", "split", "metric", "value"}`` of the best evaluated epoch, or None.
        self.best = None
        self.since_best = 0           # evaluations since the best one
        self.kept = []                # the checkpoint files written and not removed, oldest first
        self.best_path = None         # the keep_best file once written
        self.stop = None              # {"reason": "early_stopping", "epoch", "detail"} once decided

    @classmethod
    def of(cls, exp, splits, world_rank=0, path=None):
        """The policy of experiment ``exp`` (its ``checkpoint_policy`` keys) for a run whose
        evaluated splits are ``splits`` and whose checkpoints go to ``path`` (default: the
        experiment's ``checkpoint.path``); ConfigError (at the experiment's ``checkpoint``) for a
        monitored metric no evaluated split gives, or keys that need evaluations without them."""
        keys = dict(exp.checkpoint_policy or {})
        monitor = keys.get("monitor")
        wants = keys.get("keep_best") or keys.get("patience")
        if monitor is None:
            if "valid" in splits:
                monitor = f"valid_{exp.default_metric}"
            elif keys.get("select_on_test") and "test" in splits:
                monitor = f"test_{exp.default_metric}"
            elif wants:
                raise ConfigError("checkpoint keep_best and patience select on a validation split, and the data "
                                  "has none; give the dataset a validation split, or set checkpoint "
                                  "select_on_test: true to select on the test split", key="checkpoint")
        else:
            check_monitor(keys, splits, exp.metric_names())
        if wants and not exp.eval_every:
            raise ConfigError("checkpoint keep_best and patience need evaluated epochs: set eval_every "
                              "(e.g. eval_every: 1)", key="checkpoint")
        return cls(path or exp.checkpoint_path, exp.checkpoint_every, exp.checkpoint_at_end, monitor,
                   keys.get("keep_best", False), keys.get("keep_last", 0), keys.get("patience", 0),
                   keys.get("min_delta", 0.0), world_rank)

    # -- decisions ------------------------------------------------------------------------------
    def _improves(self, value):
        if self.best is None:
            return True
        if self.higher_is_better:
            return value > self.best["value"] + self.min_delta
        return value < self.best["value"] - self.min_delta

    def check_monitor(self, record):
        """ConfigError (at ``checkpoint``) when ``record`` is an evaluated epoch's and lacks the
        monitored metric (``valid_top5_misclass`` with 3 classes): it would never select."""
        split = self.monitor.split("_", 1)[0] if self.monitor else None
        if split is None or self.monitor in record or f"{split}_misclass" not in record:
            return
        names = sorted(k for k in record if k.startswith(split + "_") and not isinstance(record[k], (list, dict)))
        raise ConfigError(f"checkpoint monitor {self.monitor} is not measured; the {split} split gives "
                          f"{', '.join(names)}", key="checkpoint")

    def _observe(self, record):
        """The best epoch and the patience counter after ``record`` (an evaluated epoch's)."""
        value = record.get(self.monitor) if self.monitor else None
        if value is None:
            return False
        if self._improves(value):
            self.best = {"epoch": record["epoch"], "split": self.monitor.split("_", 1)[0],
                         "metric": self.monitor, "value": value}
            if self.monitor.endswith("_misclass") and self.monitor.count("_") == 1:
                self.best["misclass"] = value
            self.since_best = 0
            return True
        self.since_best += 1
        return False

    def keep(self, path):
        """``path`` (a checkpoint written inside an epoch) joins the kept files; returns those
        ``keep_last`` lets go (:meth:`_keep`), to remove once it is complete."""
        return self._keep(path)

    def _keep(self, path):
        """``path`` joins the kept files; returns those ``keep_last`` lets go (never ``path``,
        never the best file)."""
        if path in self.kept:
            self.kept.remove(path)
        self.kept.append(path)
        if not self.keep_last or len(self.kept) <= self.keep_last:
            return []
        gone, self.kept = self.kept[:-self.keep_last], self.kept[-self.keep_last:]
        return [p for p in gone if p != self.best_path]

    def epoch_done(self, record, last):
        """Decide after the epoch of ``record`` (its metrics in it; ``last``: the last epoch of
        ``num_epochs``): writes the decisions into ``record`` and returns ``{"checkpoint": path
        or None (due now), "final": path or None (the at-end checkpoint, written after
        training), "best": path or None, "remove": [paths] (after the writes)}``."""
        epoch = record["epoch"]
        if self._observe(record):
            record["best"] = True
            if self.keep_best and self.path:
                self.best_path = record["best_checkpoint"] = checkpoint_file(best_file(self.path), epoch)
        if self.patience and self.monitor in record:
            record["since_best"] = self.since_best
            if self.since_best >= self.patience:
                self.stop = {"reason": "early_stopping", "epoch": epoch,
                             "detail": f"{self.monitor} did not improve by more than {self.min_delta:g} in "
                                       f"{self.since_best} evaluation(s) since epoch {self.best['epoch']} "
                                       f"(patience {self.patience})"}
                record["stop"] = self.stop
        last = last or self.stop is not None
        due = bool(self.path and self.every and (epoch + 1) % self.every == 0 and not (last and self.at_end))
        final = bool(self.path and last and self.at_end)
        out = {"checkpoint": None, "final": None, "best": record.get("best_checkpoint"), "remove": []}
        if due or final:
            path = checkpoint_file(self.path, epoch)
            record["checkpoint"] = path
            out["checkpoint" if due else "final"] = path
            out["remove"] = self._keep(path)
            if out["remove"]:
                record["removed"] = out["remove"]
        return out

    def replay(self, history):
        """The state after ``history`` (a checkpoint's epoch records): the same best epoch,
        patience counter, kept files and stop as when they were recorded."""
        for record in history:
            if "epoch" not in record:
                continue
            self._observe(record)
            if record.get("best_checkpoint"):
                self.best_path = record["best_checkpoint"]
            for written in (record.get("midway_checkpoint"), record.get("checkpoint")):
                if written:
                    if written in self.kept:
                        self.kept.remove(written)
                    self.kept.append(written)
            self.kept = [p for p in self.kept if p not in record.get("removed", ())]
            if record.get("stop"):
                self.stop = record["stop"]

    def remove(self, paths):
        """Remove checkpoints the policy let go, files or sharded folders (world rank 0; one
        already gone is no error)."""
        from ..models.sharded import remove_any
        if self.world_rank != 0:
            return
        for p in paths:
            try:
                remove_any(p)
            except FileNotFoundError:
                pass

    def files(self):
        """The checkpoint files the run leaves: the kept ones, then the best one."""
        return list(self.kept) + ([self.best_path] if self.best_path and self.best_path not in self.kept else [])

    def summary(self, num_epochs, last_epoch):
        """``{"stop", "best_epoch", "checkpoints", "best_checkpoint"}`` for the run record."""
        stop = self.stop or {"reason": "num_epochs", "epoch": last_epoch,
                             "detail": f"trained the {num_epochs} epoch(s) of num_epochs"}
        return {"stop": stop, "best_epoch": self.best, "checkpoints": self.files(),
                "best_checkpoint": self.best_path}
