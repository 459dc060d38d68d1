"""Progress on every run: the terminal bar's text, the lines written without a terminal (every
N seconds without another log line, or every N batches), and the run directory's log.txt."""
import io
import logging

import pytest

from distnet.experiments.rundir import RunDir
from distnet.log import get_logger, keep_handler, setup_logging
from distnet.progress import ProgressBar, fmt_seconds, parse_every


class _Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def captured():
    """The distnet logger writing into a StringIO (as setup_logging makes it)."""
    stream = io.StringIO()
    logger = setup_logging()
    logger.handlers[0].stream = stream
    yield stream
    for h in list(logger.handlers):
        logger.removeHandler(h)


def test_parse_every_and_fmt_seconds():
    assert parse_every("30s") == (30.0, None) and parse_every("2.5") == (2.5, None)
    assert parse_every("100b") == (None, 100)
    for bad in ("0s", "b", "-1", "x"):
        with pytest.raises(ValueError):
            parse_every(bad)
    assert [fmt_seconds(s) for s in (4.4, 65, 3723)] == ["4s", "1:05", "1:02:03"]


def test_bar_shows_epoch_of_n_images_per_second_running_cost_and_eta():
    t = [0.0]
    stream = _Tty()
    bar = ProgressBar(stream=stream, clock=lambda: t[0], delay=0.0, interval=0.0, width=10)
    bar.start(num_epochs=3, batch_size=50)
    bar.batch(0, 0, 10)
    t[0] = 4.0
    bar.batch(0, 4, 10, loss_sum=100.0)   # 4 batches of 50 in 4 s; 26 batches of the run left
    line = stream.getvalue()
    bar.close()
    assert line.startswith("\repoch 1/3 [####......] 4/10")
    assert "50 img/s" in line and "cost 0.50000" in line and "ETA 26s" in line


def test_lines_without_a_terminal_after_a_quiet_period(captured):
    t = [0.0]
    bar = ProgressBar(stream=io.StringIO(), clock=lambda: t[0], lines=True, every=10.0)
    bar.start(num_epochs=2, batch_size=10)
    assert not bar.enabled and bar.lines
    bar.batch(0, 0, 100)
    t[0] = 5.0
    bar.batch(0, 5, 100, 50.0)
    assert captured.getvalue() == ""                    # 5 s: quiet still
    t[0] = 11.0
    bar.batch(0, 11, 100, 110.0)
    assert captured.getvalue() == "progress: epoch 1/2, batch 11/100, 10 img/s, cost 1.00000, ETA 3:09\n"
    t[0] = 15.0
    get_logger().info("epoch: 0, total training error: 1.0")   # a log line restarts the period
    t[0] = 24.0
    bar.batch(0, 24, 100, 240.0)
    assert captured.getvalue().count("progress:") == 1
    t[0] = 25.5
    bar.batch(0, 25, 100, 250.0)
    bar.close()
    assert captured.getvalue().count("progress:") == 2


def test_lines_every_n_batches(captured):
    bar = ProgressBar(stream=io.StringIO(), clock=lambda: 0.0, lines=True, every_batches=3)
    bar.start()
    for b in range(8):
        bar.batch(0, b, 8)
    bar.close()
    assert [line.split(", ")[1] for line in captured.getvalue().splitlines()] == ["batch 3/8", "batch 6/8"]


def test_nothing_when_disabled(captured):
    bar = ProgressBar(stream=io.StringIO(), clock=lambda: 100.0, lines=False)
    bar.start(2, 10)
    bar.batch(0, 0, 5)
    bar.batch(0, 3, 5)
    assert captured.getvalue() == ""


def test_log_txt_keeps_what_rank_0_logged_across_setup_logging(tmp_path):
    rd = RunDir.create(str(tmp_path / "run"))
    handler = keep_handler(rd.log_handler())
    try:
        logger = setup_logging(level=logging.INFO)   # as FitExperiment.setup does: log.txt stays
        logger.handlers = [h for h in logger.handlers if getattr(h, "distnet_keep", False)]
        logger.info("distnet: 1 rank(s)")
        logger.debug("not at INFO")
    finally:
        get_logger().removeHandler(handler)
        handler.close()
    rd.log_line("distnet: error: boom")
    assert (tmp_path / "run" / "log.txt").read_text() == "distnet: 1 rank(s)\ndistnet: error: boom\n"
