"""Progress of a training run on rank 0 (no dependency: a bar and a line are all it takes).

Two forms, chosen by whether the stream is a terminal:

* **a bar** (terminal): one line of stderr redrawn in place, after an epoch has run for ``delay``
  seconds (short epochs never flicker), at most every ``interval`` seconds, erased before any
  ``distnet`` log line is written (a filter on the log handlers), so log lines stay whole::

      epoch 3/12 [########..........] 41/80  1234 img/s  cost 0.44213  ETA 1:05

* **lines** (no terminal: a file, a pipe, ``mpiexec``'s forwarded output): a log line
  ``progress: epoch 3/12, batch 41/80, 1234 img/s, cost 0.44213, ETA 1:05`` whenever ``every``
  seconds (default 60) have passed without any other ``distnet`` log line, or every
  ``every_batches`` batches when that is given instead. Log lines go to the run's ``log.txt`` too.

Epochs are counted from 1 here (``epoch i/N``; neon's log lines count from 0). ``cost`` is the
running mean training cost of the epoch so far (the number neon logs at its end); ``img/s`` and
the ETA of the whole run are measured over this run's batches so far.
"""
import logging
import sys
import time

from .log import get_logger


def fmt_seconds(s):
    """``42s``, ``3:07``, ``1:02:03``."""
    s = int(round(max(s, 0)))
    if s >= 3600:
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}" if s >= 60 else f"{s}s"


def parse_every(text):
    """``--progress-every``: ``"30s"`` / ``"30"`` -> ``(30.0, None)`` seconds; ``"100b"`` ->
    ``(None, 100)`` batches. Raises ValueError otherwise."""
    t = str(text).strip().lower()
    if t.endswith("b") and t[:-1].isdigit() and int(t[:-1]) > 0:
        return None, int(t[:-1])
    t = t[:-1] if t.endswith("s") else t
    seconds = float(t)
    if not seconds > 0:
        raise ValueError(text)
    return seconds, None


class ProgressBar:
    """Progress on ``stream`` (default ``sys.stderr``): a bar when ``enabled`` (default: the
    stream is a terminal), else lines through the ``distnet`` logger when ``lines`` is True.

    Call :meth:`start` once with the run's shape (optional), :meth:`batch` before every training
    step (the run's ``RunHooks.batch``), :meth:`close` at the end.
    """

    def __init__(self, stream=None, enabled=None, width=20, delay=1.0, interval=0.2,
                 clock=time.monotonic, lines=False, every=60.0, every_batches=None):
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self.lines = lines and not enabled
        self.width, self.delay, self.interval, self.clock = width, delay, interval, clock
        self.every, self.every_batches = every, every_batches
        self.num_epochs = self.batch_size = None
        self.first_epoch = 0
        self._epoch = None
        self._start = self._last = 0.0
        self._run_start = None      # clock at the first batch of this run
        self._run_batches = 0       # batches done by this run (all epochs)
        self._shown = 0
        self._filter = _ClearFilter(self)

    def start(self, num_epochs=None, batch_size=None, first_epoch=0):
        """The run's number of epochs, the global minibatch size and its first epoch (> 0 when
        resumed); each optional (without them no ``/N``, no ``img/s``, no ETA of the run)."""
        self.num_epochs, self.batch_size, self.first_epoch = num_epochs, batch_size, first_epoch
        if self.lines:
            self._attach()

    def batch(self, epoch, batch, nbatches, loss_sum=None):
        """Called before step ``batch`` of ``nbatches`` in ``epoch``: ``batch`` steps are done;
        ``loss_sum``: the summed training loss of those steps (for the running cost)."""
        if not (self.enabled or self.lines):
            return
        now = self.clock()
        if self._run_start is None:
            self._run_start = now
        if epoch != self._epoch:
            if self._epoch is not None:
                self._run_batches += self._nbatches
            self._epoch, self._start = epoch, now
            self._last = now if self.lines else 0.0
        self._nbatches = nbatches
        if batch == 0:
            return
        if self.enabled:
            if now - self._start < self.delay or now - self._last < self.interval:
                return
            self._last = now
            self._attach()
            line = self.describe(epoch, batch, nbatches, loss_sum, now, bar=True)
            self._write("\r" + line + " " * max(0, self._shown - len(line)))
            self._shown = len(line)
        elif self.every_batches is not None:
            if batch % self.every_batches == 0:
                get_logger().info("progress: %s", self.describe(epoch, batch, nbatches, loss_sum, now))
        elif now - self._last >= self.every:
            self._last = now
            get_logger().info("progress: %s", self.describe(epoch, batch, nbatches, loss_sum, now))

    def describe(self, epoch, batch, nbatches, loss_sum, now, bar=False):
        """The progress text (``bar``: the terminal form)."""
        n = f"/{self.num_epochs}" if self.num_epochs else ""
        done = self._run_batches + batch
        elapsed = now - self._run_start
        parts = []
        if bar:
            filled = int(round(batch / max(nbatches, 1) * self.width))
            parts.append(f"epoch {epoch + 1}{n} [{'#' * filled}{'.' * (self.width - filled)}] "
                         f"{batch}/{nbatches}")
        else:
            parts.append(f"epoch {epoch + 1}{n}, batch {batch}/{nbatches}")
        if self.batch_size and elapsed > 0:
            parts.append(f"{done * self.batch_size / elapsed:.0f} img/s")
        if loss_sum is not None and self.batch_size:
            parts.append(f"cost {loss_sum / (batch * self.batch_size):.5f}")
        if elapsed > 0:
            if self.num_epochs:
                left = (nbatches - batch) + (self.num_epochs - 1 - epoch) * nbatches
            else:
                left = nbatches - batch
            parts.append(f"ETA {fmt_seconds(elapsed / done * left)}")
        return ("  " if bar else ", ").join(parts)

    def clear(self):
        """Erase the bar (if one is shown)."""
        if self._shown:
            self._write("\r" + " " * self._shown + "\r")
            self._shown = 0

    def logged(self):
        """A log line was written: the next progress line waits ``every`` seconds from now."""
        self._last = self.clock()

    def close(self):
        self.clear()
        for h in get_logger().handlers:
            h.removeFilter(self._filter)

    def _attach(self):
        for h in get_logger().handlers:  # the run's handlers (made by setup_logging), children included
            if self._filter not in h.filters:
                h.addFilter(self._filter)

    def _write(self, text):
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed terminal must not end the run
            self.enabled = False


class _ClearFilter(logging.Filter):
    """Erases the bar before a log record is written, and restarts the quiet period of the
    progress lines (never drops a record)."""

    def __init__(self, bar):
        super().__init__()
        self.bar = bar

    def filter(self, record):
        self.bar.clear()
        if self.bar.lines and not record.getMessage().startswith("progress: "):
            self.bar.logged()
        return True
