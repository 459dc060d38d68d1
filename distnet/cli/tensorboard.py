"""TensorBoard event files of a run (``distnet run --tensorboard``): rank 0 writes the scalars
of every epoch record into ``<run directory>/tensorboard``, through tensorboardX (the optional
extra ``distnet[tensorboard]``: a small writer with no TensorFlow, whose files TensorBoard reads).

Tags put the splits of one quantity side by side in TensorBoard's charts: ``cost/train``,
``cost/valid``, ``misclass/test``, ... (a record's ``<split>_<metric>``; the training split's
evaluated cost is ``cost/train_evaluated``, beside the epoch's running ``cost/train``), then
``learning_rate/<layer>`` (the rate each layer trained at in that epoch, as the model's resolved
rates give it: ``model.learning_rates(epoch)``, :mod:`distnet.optim.rates`; a rate that changes
every step is that of the epoch's last step), ``throughput/images_per_second`` and
``time/<what>_seconds``; GB's pretraining writes ``pretrain_cost/<layer>`` (step: its
pretraining epoch), and the end of the run ``final_misclass/<split>`` (step: the last epoch).
A per-pixel model's overlaps are scalars like the others (``miou/valid``, ``dice/test``,
``pixel_acc/train``), its per-class ones one tag per class (``class_iou/valid/<k>``,
``class_dice/valid/<k>``), and the end of the run adds ``final_miou/<split>``,
``final_pixel_acc/<split>`` and ``final_dice/<split>``."""
import numbers

from ..errors import ConfigError

#: Splits whose metrics a record names ``<split>_<metric>``.
SPLITS = ("train", "valid", "test")
#: Record keys that are not scalars of the run's progress.
_NOT_SCALARS = {"epoch", "from_checkpoint", "checkpoint"}
#: Per-class lists written as one scalar per class.
_PER_CLASS = ("class_iou", "class_dice")
#: The final record's metrics of each split.
_FINAL = ("misclass", "miou", "pixel_acc", "dice")


def require_writer():
    """Raise :class:`ConfigError` (exit 2, before anything runs) when tensorboardX is missing."""
    try:
        import tensorboardX  # noqa: F401
    except ImportError as e:
        raise ConfigError(f"--tensorboard needs tensorboardX, which cannot be imported here ({e}); install it "
                          "with pip install 'distnet[tensorboard]'") from None


def scalars(record, train_images=None):
    """``{tag: value}``: the scalars of one epoch record (see module docstring). ``train_images``:
    images in one training epoch (for ``throughput/images_per_second``; None: not written)."""
    out = {}
    for key, value in record.items():
        split, _, metric = key.partition("_")
        if split in SPLITS and metric in _PER_CLASS and isinstance(value, list):
            out.update({f"{metric}/{split}/{k}": v for k, v in enumerate(value) if isinstance(v, numbers.Real)})
        if key in _NOT_SCALARS or isinstance(value, bool) or not isinstance(value, numbers.Real):
            continue
        if key == "cost":
            out["cost/train"] = value
        elif key == "train_cost":   # the training split measured after the epoch, not its running cost
            out["cost/train_evaluated"] = value
        elif key == "seconds":
            out["time/epoch_seconds"] = value
        elif key.endswith("seconds"):
            out[f"time/{key}"] = value
        else:
            out[f"{metric}/{split}" if split in SPLITS and metric else key] = value
    seconds = record.get("seconds")
    if train_images and seconds:
        out["throughput/images_per_second"] = train_images / seconds
    return out


class TensorBoardLog:
    """The event files of one run, in ``logdir`` (rank 0 only). Call :meth:`started`, then
    :meth:`epoch` / :meth:`pretrain` per record, and :meth:`close`."""

    def __init__(self, logdir):
        from tensorboardX import SummaryWriter
        self.logdir = logdir
        self.writer = SummaryWriter(logdir=logdir)
        self.model = None
        self.train_images = None

    def started(self, model):
        """``model``: the run's model, whose ``learning_rates(epoch)`` gives each epoch's rates."""
        self.model = model

    def loaded(self, sizes):
        """``sizes``: ``{split: images}`` of the run's data."""
        self.train_images = sizes.get("train")

    def epoch(self, record):
        step = int(record["epoch"])
        for tag, value in scalars(record, self.train_images).items():
            self.writer.add_scalar(tag, value, step)
        for layer, rate in self.model.learning_rates(step).items():
            self.writer.add_scalar(f"learning_rate/{layer}", rate, step)
        self.writer.flush()    # a crashed run keeps the epochs it finished

    def pretrain(self, record):
        if isinstance(record.get("cost"), numbers.Real):
            self.writer.add_scalar(f"pretrain_cost/{record['pretrain']}", record["cost"],
                                   int(record["pretrain_epoch"]))

    def final(self, record, step):
        """The final record's error rates (``final_misclass/<split>``; a per-pixel model's
        overlaps too) at the last epoch ``step``."""
        for split in SPLITS:
            for metric in _FINAL:
                value = record.get(f"{split}_{metric}")
                if isinstance(value, numbers.Real):
                    self.writer.add_scalar(f"final_{metric}/{split}", value, step)

    def close(self):
        self.writer.close()
