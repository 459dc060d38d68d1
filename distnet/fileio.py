"""Writing files safely: atomic replacement, exclusive claims, stale temporaries, the umask.

Low level (imports nothing of distnet but :mod:`distnet.errors`), so that every layer can use it.

* :func:`atomic_target`: write to a temporary next to the destination, move it into place with
  :func:`os.replace` only when complete; :func:`hdf5_file` opens such a temporary for h5py so
  that a full disk is an ``OSError``, never a crash. Temporaries are named
  ``.<name>.<host>.<pid>.<random>.tmp``; one whose process is gone (``kill -9`` mid-write) is
  removed the next time the same file is written (:func:`clean_stale_temps`).
* New files get the mode a plain ``open`` gives (``0o666`` less the umask), not ``mkstemp``'s 0600.
* :func:`claim_file`: create a file that must not exist yet (``O_EXCL``): of two processes that
  race for it, exactly one wins.
* :func:`check_writable`: find out before a long job whether a destination folder takes files.
* :func:`refuse_existing`: the "never replace what exists unless --force" rule.

Every failure a user can cause raises :class:`OutputError`: one line naming the path and the
reason (``Read-only file system``, ``No space left on device``, ...).
"""
import contextlib
import errno
import os
import re
import shutil
import socket
import tempfile

from .errors import DistnetError

TMP_SUFFIX = ".tmp"


class OutputError(DistnetError):
    """A file or folder that cannot (or must not) be written."""


def reason(exc):
    """The short reason of an ``OSError`` (its ``strerror``), else its text."""
    return getattr(exc, "strerror", None) or str(exc)


def umask():
    """The process's umask (read without changing it for longer than two calls)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def umask_mode(path):
    """Give ``path`` the mode a plain ``open(path, "w")`` would have given it."""
    os.chmod(path, 0o666 & ~umask())


def _host():
    return socket.gethostname().split(".")[0].replace(".", "_") or "host"


def _tmp_prefix(path):
    return "." + os.path.basename(path) + "."


def pid_alive(pid):
    """Whether process ``pid`` exists on this host."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def clean_stale_temps(path):
    """Remove the temporaries of :func:`atomic_target` for ``path`` left by processes of this
    host that no longer exist; returns the removed paths. Others' live temporaries are kept."""
    folder = os.path.dirname(os.path.abspath(path))
    prefix, host = _tmp_prefix(path), _host()
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if not (name.startswith(prefix) and name.endswith(TMP_SUFFIX)):
            continue
        parts = name[len(prefix):-len(TMP_SUFFIX)].split(".")
        if len(parts) != 3 or parts[0] != host or not parts[1].isdigit() or pid_alive(parts[1]):
            continue
        try:
            os.unlink(os.path.join(folder, name))
            removed.append(os.path.join(folder, name))
        except OSError:
            pass
    return removed


@contextlib.contextmanager
def atomic_target(path):
    """Yield a temporary path next to ``path``; on success move it onto ``path`` with
    :func:`os.replace` (atomic on POSIX), on any exception delete it. Folders are created.

    The temporary name is unique per call (host, pid, random part), so ranks writing different
    files into one folder, or two processes racing on one file, never write into each other's
    temporary file. It has the umask's mode from the start, so the file it becomes does too.
    Stale temporaries of ``path`` (their process is gone) are removed first.
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    clean_stale_temps(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f"{_tmp_prefix(path)}{_host()}.{os.getpid()}.",
                               suffix=TMP_SUFFIX)
    try:
        os.fchmod(fd, 0o666 & ~umask())
    finally:
        os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextlib.contextmanager
def hdf5_file(tmp, sync=False):
    """An ``h5py.File`` created at ``tmp`` (e.g. a temporary of :func:`atomic_target`) whose
    writes go through a Python file object. A disk that fills mid-write is then an ``OSError``
    (ENOSPC) at that write: HDF5's own file driver left unwritable buffers behind instead, which
    it retried when its objects were freed (an 'Exception ignored in ObjectID.__dealloc__'
    traceback each) and at exit (a segmentation fault, status 139, after the error was said).
    ``sync``: on disk (``fsync``) before the caller renames it."""
    import h5py
    with open(tmp, "r+b") as fh:
        with h5py.File(fh, "w") as f:
            yield f
        fh.flush()
        if sync:
            os.fsync(fh.fileno())


def atomic_write_bytes(path, payload):
    """Write ``payload`` (bytes) to ``path`` through :func:`atomic_target`."""
    with atomic_target(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(payload)


def write_text(path, text, what="file"):
    """Write ``text`` to ``path`` atomically; :class:`OutputError` (one line) if it cannot be."""
    try:
        atomic_write_bytes(path, text.encode("utf-8"))
    except OSError as e:
        raise OutputError(f"cannot write {what} {path}: {reason(e)}") from None


def claim_file(path, text="", what="file"):
    """Create ``path`` holding ``text``, failing if it exists (``O_EXCL``: of several processes
    racing, exactly one succeeds). ``FileExistsError`` if taken; :class:`OutputError` for any
    other failure. The file gets the umask's mode."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        raise
    except OSError as e:
        raise OutputError(f"cannot create {what} {path}: {reason(e)}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise OutputError(f"cannot write {what} {path}: {reason(e)}") from None


def check_writable(path, what="file"):
    """:class:`OutputError` unless a file can be created at ``path``: in its folder, or, if that
    does not exist yet, in the nearest existing folder above it (nothing is created). Probes by
    creating and removing a temporary there, so it sees what permission bits do not tell (a
    read-only mount, a path under a regular file, root's rights)."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise OutputError(f"cannot write {what} {path}: it is a directory")
    while not os.path.lexists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise OutputError(f"cannot write {what} {path}: {folder} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=f"{_tmp_prefix(path)}{_host()}.{os.getpid()}.",
                                     suffix=TMP_SUFFIX)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise OutputError(f"cannot write {what} {path}: {reason(e)}") from None


def refuse_existing(path, what="file", force=False, hint="give --force to replace it"):
    """:class:`OutputError` if ``path`` exists (and ``force`` is false): nothing that exists is
    replaced without being asked to."""
    if not force and os.path.lexists(path):
        raise OutputError(f"{what} {path} already exists; {hint}")


def same_file(a, b):
    """Whether paths ``a`` and ``b`` name the same existing file."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def free_space(path):
    """``(folder, bytes free)`` of the file system that a file at ``path`` would be written to
    (the nearest existing folder above it)."""
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    return folder, shutil.disk_usage(folder).free


def write_failure(exc):
    """One line saying why a write failed: ``No space left on device`` for a full disk (an
    ``OSError`` with ENOSPC/EDQUOT, or h5py's text carrying ``error message = '...'``), else the
    first line of the error's text (h5py's run over several, with times and buffer addresses)."""
    if is_disk_full(exc):
        return "No space left on device"
    text = str(getattr(exc, "strerror", None) or exc)
    m = re.search(r"error message = '([^']*)'", text)
    return m.group(1) if m else text.splitlines()[0] if text else type(exc).__name__


def is_disk_full(exc):
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
