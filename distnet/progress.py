"""A progress bar for long epochs, on one line of stderr (rank 0 only; no dependency).

It is drawn only when the stream is a terminal, only after an epoch has run for ``delay``
seconds (short epochs never flicker), at most every ``interval`` seconds, and it is erased
before any ``distnet`` log line is written (a filter on the log handlers), so log lines stay whole.
"""
import logging
import sys
import time

from .log import get_logger


def _fmt_seconds(s):
    s = int(round(s))
    return f"{s // 60}:{s % 60:02d}" if s >= 60 else f"{s}s"


class ProgressBar:
    """``epoch 3  [########..........]  41/100 batches  12s, ~17s left``.

    ``stream`` defaults to ``sys.stderr``; ``enabled`` defaults to ``stream.isatty()``.
    Use :meth:`batch` as ``MLP.on_batch`` and call :meth:`close` at the end.
    """

    def __init__(self, stream=None, enabled=None, width=24, delay=1.0, interval=0.2, clock=time.monotonic):
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self.width, self.delay, self.interval, self.clock = width, delay, interval, clock
        self._epoch = None
        self._start = self._last = 0.0
        self._shown = 0
        self._filter = _ClearFilter(self)

    def batch(self, epoch, batch, nbatches):
        """Called before step ``batch`` of ``nbatches`` in ``epoch``: ``batch`` steps are done."""
        if not self.enabled:
            return
        now = self.clock()
        if epoch != self._epoch:
            self._epoch, self._start, self._last = epoch, now, 0.0
        elapsed = now - self._start
        if elapsed < self.delay or now - self._last < self.interval or batch == 0:
            return
        self._last = now
        for h in get_logger().handlers:  # the run's handlers (made by setup_logging), children included
            if self._filter not in h.filters:
                h.addFilter(self._filter)
        frac = batch / max(nbatches, 1)
        filled = int(round(frac * self.width))
        left = elapsed / frac - elapsed if frac > 0 else 0.0
        line = (f"epoch {epoch}  [{'#' * filled}{'.' * (self.width - filled)}]  {batch}/{nbatches} "
                f"batches  {_fmt_seconds(elapsed)}, ~{_fmt_seconds(left)} left")
        self._write("\r" + line + " " * max(0, self._shown - len(line)))
        self._shown = len(line)

    def clear(self):
        """Erase the bar (if one is shown)."""
        if self._shown:
            self._write("\r" + " " * self._shown + "\r")
            self._shown = 0

    def close(self):
        self.clear()
        for h in get_logger().handlers:
            h.removeFilter(self._filter)

    def _write(self, text):
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed terminal must not end the run
            self.enabled = False


class _ClearFilter(logging.Filter):
    """Erases the bar before a log record is written (never drops a record)."""

    def __init__(self, bar):
        super().__init__()
        self.bar = bar

    def filter(self, record):
        self.bar.clear()
        return True
