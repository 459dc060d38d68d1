"""Rank-aware logging: rank 0 reports progress; other ranks only speak up for warnings and errors,
each line prefixed with its rank. A warning that every rank would log alike, because it is about
what all ranks read (a data file's layout or chunking), goes through :func:`warn_once_per_job`:
rank 0 of the job logs it, the others do not, so ``mpiexec -n N`` prints it once, not N times."""
import logging
import os
import sys

LOGGER_NAME = "distnet"


def get_logger():
    return logging.getLogger(LOGGER_NAME)


#: The keys of an experiment's ``logging`` mapping (neon's ``logging.basicConfig`` arguments, and
#: distnet's ``log_dir``: a log file per rank).
LOGGING_KEYS = ("filename", "format", "level", "log_dir")
#: The format of a rank's own log file (``log_dir``): time, rank, host, level.
RANK_FILE_FORMAT = "%(asctime)s [rank {rank} on {host}] %(levelname)s %(message)s"
_rank_file = {"handler": None}


#: The launcher's variables holding this process's rank in the job (MPICH's hydra, PMIx, Open MPI).
LAUNCHER_RANK_VARS = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK")


def job_rank():
    """This process's rank in the job, as its launcher announced it in the environment (known
    before MPI starts and before :func:`setup_logging`); 0 when no launcher started it."""
    for var in LAUNCHER_RANK_VARS:
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return 0


def warn_once_per_job(logger, msg, *args):
    """``logger.warning(msg, *args)`` on rank 0 of the job only (:func:`job_rank`): for warnings
    that every rank would log alike, about what all ranks read (a data file's layout, its
    chunking), so ``mpiexec -n N`` prints one line, not N. A warning about one rank's own part
    (its tile, its cache file) is a plain ``logger.warning`` on that rank, prefixed ``[rank R]``."""
    if job_rank() == 0:
        logger.warning(msg, *args)


def check_logging(mapping):
    """An experiment's ``logging`` mapping checked: only :data:`LOGGING_KEYS`; ``level`` an int
    or a level name (``DEBUG``, ``info``, ...), returned as an int; ``format`` a ``%``-style
    format whose fields a log record has; ``filename`` a string. ConfigError (key ``logging``)
    otherwise, so a bad value ends the run before it starts, not at its first log line."""
    from .errors import ConfigError
    out = dict(mapping or {})
    unknown = sorted(set(map(str, out)) - set(LOGGING_KEYS))
    if unknown:
        raise ConfigError(f"unknown logging key(s) {unknown}; valid: {list(LOGGING_KEYS)}", key="logging")
    level = out.get("level")
    if level is not None:
        names = logging.getLevelNamesMapping()
        if isinstance(level, str) and level.upper() in names:
            out["level"] = names[level.upper()]
        elif isinstance(level, bool) or not isinstance(level, int) or level < 0:
            raise ConfigError(f"logging level must be an integer >= 0 (10 DEBUG, 20 INFO, ...) or one of "
                              f"{', '.join(n for n in names if n != 'NOTSET')}, got {level!r}", key="logging")
    fmt = out.get("format")
    if fmt is not None:
        if not isinstance(fmt, str):
            raise ConfigError(f"logging format must be a string, got {fmt!r}", key="logging")
        try:
            record = logging.LogRecord(LOGGER_NAME, logging.INFO, __file__, 0, "a message", (), None)
            logging.Formatter(fmt).format(record)
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"logging format {fmt!r} is not a %-style format of log record fields "
                              f"such as %(message)s, %(asctime)s, %(levelname)s ({type(e).__name__}: {e})",
                              key="logging") from None
    for key in ("filename", "log_dir"):
        value = out.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise ConfigError(f"logging {key} must be a {'file' if key == 'filename' else 'folder'} name, got "
                              f"{value!r}", key="logging")
    return out


class LogFile(logging.FileHandler):
    """A log file that a full disk (or any failing write) cannot turn into tracebacks: the first
    failed write prints one warning naming the file and the reason, and from then on the lines
    go to ``fallback`` (a stream, e.g. stderr) or nowhere (None: they are printed anyway, as
    for the run directory's ``log.txt``). Python's ``FileHandler`` printed a '--- Logging error
    ---' traceback for every line, and raised from ``close``."""

    def __init__(self, filename, fallback=None, prefix=""):
        super().__init__(filename, encoding="utf-8")
        self.fallback, self.prefix, self.failed = fallback, prefix, False

    def emit(self, record):
        if self.failed:
            if self.fallback is not None:
                self.fallback.write(self.format(record) + "\n")
            return
        super().emit(record)

    def handleError(self, record):
        error = sys.exc_info()[1]
        if self.failed or not isinstance(error, OSError):
            return super().handleError(record)
        self.failed = True
        where = "its lines go to stderr from here on" if self.fallback is not None else "it stops here"
        sys.stderr.write(f"{self.prefix}distnet: warning: cannot write the log file {self.baseFilename}: "
                         f"{error.strerror or error}; {where}\n")
        self.emit(record)

    def close(self):
        try:
            super().close()
        except OSError:     # the last lines could not be flushed: said at the first failure
            pass


def setup_logging(rank=0, size=1, level=logging.INFO, fmt=None, filename=None, log_dir=None, host=None):
    """Configure the ``distnet`` logger for this rank (idempotent).

    ``fmt``/``filename`` come from the experiment's neon-style ``logging`` mapping (see
    :func:`check_logging`; a log file that cannot be opened is a ConfigError). ``log_dir``: this
    rank also logs at ``level`` into ``log_dir/rank-RRRRR.log`` (on its own node; ``host``
    names the node in its lines), where the other ranks' lines are not only their warnings.
    Handlers marked with :func:`keep_handler` (the run directory's ``log.txt``) stay.
    """
    from .errors import ConfigError
    logger = get_logger()
    for h in list(logger.handlers):
        if not getattr(h, "distnet_keep", False):
            logger.removeHandler(h)
            if h is _rank_file["handler"]:
                h.close()
    _rank_file["handler"] = None
    prefix = f"[rank {rank}] " if size > 1 else ""
    shown = level if rank == 0 else max(level, logging.WARNING)
    try:
        handler = LogFile(filename, sys.stderr, prefix) if filename and rank == 0 else logging.StreamHandler(sys.stderr)
    except OSError as e:
        raise ConfigError(f"cannot open the log file {filename}: {e.strerror or e}", key="logging") from None
    handler.setFormatter(logging.Formatter(prefix + (fmt or "%(message)s")))
    handler.setLevel(shown)
    logger.addHandler(handler)
    if log_dir:
        path = os.path.join(log_dir, f"rank-{rank:05d}.log")
        try:
            os.makedirs(log_dir, exist_ok=True)
            own = _rank_file["handler"] = LogFile(path, None, prefix)
        except OSError as e:
            raise ConfigError(f"cannot open the log file {path}: {e.strerror or e}", key="logging") from None
        own.setFormatter(logging.Formatter(RANK_FILE_FORMAT.format(rank=rank, host=host or "?")))
        own.setLevel(level)
        logger.addHandler(own)
    logger.setLevel(level if log_dir else shown)
    logger.propagate = False
    return logger


def rank_file_line(text, level=logging.INFO):
    """``text`` into this rank's own log file (``log_dir``) only, not to the screen: its phases,
    the failure that ended it. Nothing without one."""
    handler = _rank_file["handler"]
    if handler is not None:
        handler.handle(logging.LogRecord(LOGGER_NAME, level, __file__, 0, text, (), None))


def keep_handler(handler):
    """Add ``handler`` to the ``distnet`` logger for good: :func:`setup_logging` keeps it."""
    handler.distnet_keep = True
    get_logger().addHandler(handler)
    return handler
