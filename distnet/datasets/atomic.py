"""Write a file so that a crash never leaves half of it under its real name (the helpers live in
:mod:`distnet.fileio`; this module keeps the old import path)."""
from ..fileio import atomic_target, atomic_write_bytes  # noqa: F401
