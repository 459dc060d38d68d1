"""Rank-aware logging: rank 0 reports progress; other ranks only speak up for warnings and errors,
each line prefixed with its rank."""
import logging
import sys

LOGGER_NAME = "distnet"


def get_logger():
    return logging.getLogger(LOGGER_NAME)


def setup_logging(rank=0, size=1, level=logging.INFO, fmt=None, filename=None):
    """Configure the ``distnet`` logger for this rank (idempotent).

    ``fmt``/``filename`` come from the experiment's neon-style ``logging`` mapping. Handlers
    marked with :func:`keep_handler` (the run directory's ``log.txt``) stay.
    """
    logger = get_logger()
    for h in list(logger.handlers):
        if not getattr(h, "distnet_keep", False):
            logger.removeHandler(h)
    prefix = f"[rank {rank}] " if size > 1 else ""
    handler = logging.FileHandler(filename) if filename and rank == 0 else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(prefix + (fmt or "%(message)s")))
    logger.addHandler(handler)
    logger.setLevel(level if rank == 0 else max(level, logging.WARNING))
    logger.propagate = False
    return logger


def keep_handler(handler):
    """Add ``handler`` to the ``distnet`` logger for good: :func:`setup_logging` keeps it."""
    handler.distnet_keep = True
    get_logger().addHandler(handler)
    return handler
