"""Errors a user can cause. Every one is a :class:`DistnetError`; the CLI prints its message
(on every rank) and exits with its ``exit_code`` instead of showing a traceback: 2 for the
user's configuration or command line (:class:`ConfigError`, :class:`OptionError`), 1 for
what running met (data, files, checkpoints, topology, training), on every command."""


class DistnetError(Exception):
    """Base class of errors caused by input: configuration, data, topology, checkpoints.
    ``exit_code``: the exit status of a ``distnet`` command that fails with it (1; 2 for a
    :class:`ConfigError` or :class:`OptionError`), on every rank of a multi-rank job."""

    exit_code = 1
    #: The rank an error that every rank raises is about (data that differ on that rank: the
    #: run record names it); None: the rank that raises it.
    rank = None


class ConfigError(DistnetError):
    """A problem in an experiment file. ``where`` is ``"file:line"`` when known."""

    exit_code = 2

    def __init__(self, message, where=None, key=None):
        self.where = where
        self.key = key
        self.bare_message = message
        prefix = f"{where}: " if where else ""
        keypart = f"key '{key}': " if key else ""
        super().__init__(f"{prefix}{keypart}{message}")


class OptionError(DistnetError):
    """A command-line option or argument whose value cannot work, or options that do not go
    together (``--size 0x3``, an output that is not ``.h5``): exit 2, as click's usage errors."""

    exit_code = 2


class GeometryError(DistnetError):
    """A layer geometry that cannot work: an empty output, a tile that owns nothing, ..."""


class TopologyError(DistnetError):
    """A process grid that does not match the launcher's size or cannot cut the images."""


class DataError(DistnetError):
    """Missing, truncated or inconsistent data files and shards."""


class MissingDataError(DataError):
    """A data file or folder that an experiment names is not there. ``key``: the dataset key
    that names it (``repo_path``, ``path``); ``path``: the path as that key gives it: a relative
    one is read from the current directory, which the message then names (the usual slip:
    running from another folder than the one the experiment's paths are relative to).
    ``where``: the dataset's ``file:line``, added by the experiment that loads it."""

    def __init__(self, message, key=None, path=None, where=None):
        import os
        self.bare_message, self.key, self.path, self.where = message, key, path, where
        hint = ""
        if path is not None and not os.path.isabs(str(path)):
            hint = f" (a relative path is read from the current directory, {os.getcwd()})"
        prefix = (f"{where}: " if where else "") + (f"key '{key}': " if key else "")
        super().__init__(f"{prefix}{message}{hint}")

    def located(self, where):
        """The same error at ``where`` (``file:line``)."""
        return MissingDataError(self.bare_message, self.key, self.path, where)


class CheckpointError(DistnetError):
    """A checkpoint that cannot be read or does not fit the experiment."""


class TrainingError(DistnetError):
    """Training cannot go on (e.g. the loss became NaN or infinite)."""
