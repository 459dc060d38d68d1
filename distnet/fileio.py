"""Writing files so that a crash never leaves half of one under its real name.

A foundation module (DESIGN §3): datasets (IDX files, caches), checkpoints and run directories
all write through it, so it imports nothing of distnet's.
"""
import contextlib
import os
import tempfile


@contextlib.contextmanager
def atomic_target(path):
    """Yield a temporary path next to ``path``; on success move it onto ``path`` with
    :func:`os.replace` (atomic on POSIX), on any exception delete it. Folders are created.

    The temporary name is unique per call, so ranks writing different files into one folder, or
    two processes racing on one file, never write into each other's temporary file.
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_bytes(path, payload):
    """Write ``payload`` (bytes) to ``path`` through :func:`atomic_target`."""
    with atomic_target(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(payload)


def umask_mode(path):
    """Give a file made by :func:`atomic_target` (``mkstemp`` creates it 0600) the mode a plain
    ``open`` would have given it (0666 less the process umask)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)
