"""The IDX file format of MNIST (uint8 payloads only), plain or gzipped.

Layout: a big-endian header of 4 + 4·ndim bytes — the magic number ``0x0000TTDD`` (TT = 0x08 for
uint8, DD = number of dimensions) followed by one int32 per dimension — then the values,
row-major. MNIST images have magic 2051 (``0x803``, dims ``N, rows, cols``) and labels 2049
(``0x801``, dims ``N``).
"""
import gzip
import struct
import zlib

import numpy as np

from ..errors import DataError
from ..fileio import atomic_write_bytes

UINT8 = 0x08
IMAGES_MAGIC = 0x0803   # 2051
LABELS_MAGIC = 0x0801   # 2049


def _read_bytes(path):
    try:
        if str(path).endswith(".gz"):
            with gzip.open(path, "rb") as f:
                return f.read()
        with open(path, "rb") as f:
            return f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"cannot read {path}: {e}") from None


def read_idx(path, magic):
    """The array stored in the IDX file ``path`` (``.gz`` = gzipped), checked against ``magic``.

    Returns a read-only uint8 array of the header's shape. Raises :class:`DataError` naming the
    file for a wrong magic number or a payload whose size disagrees with the header (a truncated
    download, say), giving the expected and actual byte counts.
    """
    data = _read_bytes(path)
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(data) < 4:
        raise DataError(f"{path} is truncated: {len(data)} bytes, not even an IDX magic number")
    (found,) = struct.unpack(">i", data[:4])
    if found != magic:
        raise DataError(f"{path} is not the expected IDX file: magic number {found}, expected {magic}")
    if len(data) < header:
        raise DataError(f"{path} is truncated: the header needs {header} bytes, the file has {len(data)}")
    dims = struct.unpack(f">{ndim}i", data[4:header])
    if any(d < 0 for d in dims):
        raise DataError(f"{path}: negative dimension in the IDX header {dims}")
    expected = header + int(np.prod(dims, dtype=np.int64))
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "longer than its header says"
        raise DataError(f"{path} is {what}: the header {dims} means {expected} bytes, "
                        f"the file has {len(data)} bytes")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def map_idx(path, magic):
    """Like :func:`read_idx`, but a plain (not gzipped) file is memory-mapped: its pixels are
    read from disk as they are indexed. The header and the file size are checked alike."""
    import os
    if str(path).endswith(".gz"):
        return read_idx(path, magic)
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    try:
        with open(path, "rb") as f:
            head = f.read(header)
        size = os.path.getsize(path)
    except OSError as e:
        raise DataError(f"cannot read {path}: {e}") from None
    if len(head) < header or struct.unpack(">i", head[:4])[0] != magic:
        return read_idx(path, magic)    # its message says what is wrong
    dims = struct.unpack(f">{ndim}i", head[4:header])
    if any(d < 0 for d in dims) or size != header + int(np.prod(dims, dtype=np.int64)):
        return read_idx(path, magic)
    return np.memmap(path, dtype=np.uint8, mode="r", offset=header, shape=tuple(dims))


def write_idx(path, array):
    """Write a uint8 ``array`` (any ndim) to ``path`` as IDX; gzipped if ``path`` ends in ``.gz``.

    The file is written to a temporary name in the same folder and moved into place, so a crash
    never leaves a partial file. Returns ``path``.
    """
    array = np.ascontiguousarray(array)
    if array.dtype != np.uint8:
        raise ValueError(f"IDX writer stores uint8 only, got {array.dtype}")
    header = struct.pack(f">i{array.ndim}i", (UINT8 << 8) | array.ndim, *array.shape)
    payload = header + array.tobytes()
    if str(path).endswith(".gz"):
        payload = gzip.compress(payload, mtime=0)
    atomic_write_bytes(path, payload)
    return path

