"""Explicit scaling of stored values into the model's float dtype: ``scale``, ``mean``, ``std``.

``x_float = (x_stored.astype(dtype) * scale - mean[c]) / std[c]``, computed in ``dtype`` element
by element, so a minibatch scaled on the fly equals the same rows of the whole split scaled at once
(bit for bit). Steps that are identities (``scale: 1``, no ``mean``, no ``std``) are skipped.

Keys (of :class:`~distnet.datasets.HDF5Dataset` and :class:`~distnet.datasets.NumpyDataset`):

``scale``
    A number (``0.00392156862745098``) or a fraction written as a string (``"1/255"``; YAML reads
    an unquoted ``1/255`` as that string too). Default: ``1`` for float data. For integer data
    (uint8 pixels) there is no default: distnet refuses to feed raw integers and asks for
    ``scale`` (``scale: 1`` keeps the values as stored).
``mean``, ``std``
    One number, or one number per channel (``[0.49, 0.48, 0.45]``), applied after ``scale``
    (so in the scaled units). ``std`` values must be > 0.
``normalize``
    ``per_channel`` (or ``true``): ``mean`` and ``std`` are the per-channel statistics of the
    training images that ``distnet data convert`` (or ``distnet data stats --write``) stored in
    the file, over the whole training split (the same numbers on every rank, whatever its
    tile), brought to the scaled units: ``mean_stored * scale`` and ``std_stored * |scale|``.
    ``false`` / ``none`` (the default): off. Not together with ``mean`` or ``std``.
"""
from fractions import Fraction

import numpy as np

from ..errors import ConfigError, DataError


def parse_scale(value):
    """``scale`` as a float, or None when not given. Accepts numbers and ``"a/b"`` strings."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ConfigError(f"expected a number such as 0.00392156862745098 or '1/255', got {value!r}",
                          key="scale")
    if isinstance(value, str):
        try:
            value = float(Fraction(value.strip()))
        except (ValueError, ZeroDivisionError):
            raise ConfigError(f"expected a number or a fraction such as '1/255', got {value!r}",
                              key="scale") from None
    if not isinstance(value, (int, float)) or not np.isfinite(value) or value == 0:
        raise ConfigError(f"expected a finite non-zero number, got {value!r}", key="scale")
    return float(value)


def parse_channels(value, key, positive=False):
    """``mean`` / ``std`` as a tuple of floats (one, or one per channel), or None."""
    if value is None:
        return None
    values = value if isinstance(value, (list, tuple)) else [value]
    out = []
    for v in values:
        if isinstance(v, str):
            try:
                v = float(Fraction(v.strip()))
            except (ValueError, ZeroDivisionError):
                v = None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
            raise ConfigError(f"expected a number or a list of numbers (one per channel), got {value!r}",
                              key=key)
        if positive and v <= 0:
            raise ConfigError(f"must be > 0, got {value!r}", key=key)
        out.append(float(v))
    if not out:
        raise ConfigError("give at least one number", key=key)
    return tuple(out)


#: Values of the key ``normalize`` that turn it on / off.
NORMALIZE_ON = ("per_channel", "true")
NORMALIZE_OFF = ("none", "false")


def parse_normalize(value, mean=None, std=None):
    """``normalize`` as ``"per_channel"`` or None; ConfigError for another value, or with
    ``mean``/``std`` given too (two normalizations)."""
    if value is None or value is False:
        return None
    text = "true" if value is True else value.strip().lower() if isinstance(value, str) else None
    if text in NORMALIZE_OFF:
        return None
    if text not in NORMALIZE_ON:
        raise ConfigError(f"expected per_channel, true or false, got {value!r}", key="normalize")
    if mean is not None or std is not None:
        raise ConfigError("normalize: per_channel sets mean and std from the file's statistics; give either it "
                          "or mean and std", key="normalize")
    return "per_channel"


def normalization(stats, scale, where):
    """``(mean, std)`` tuples in the scaled units from stored-unit ``stats`` ``(mean (C,), std
    (C,))`` (None: the file keeps none) and ``scale`` (None: 1); ConfigError naming ``where``
    when there are none or a channel's std is 0."""
    if stats is None:
        raise ConfigError(f"{where} keeps no per-channel statistics (only distnet data convert writes them): run "
                          f"distnet data stats --write {where}, or give mean and std", key="normalize")
    s = 1.0 if scale is None else float(scale)
    mean, std = (np.asarray(v, np.float64) for v in stats)
    flat = np.flatnonzero(~(std > 0))
    if len(flat):
        k = int(flat[0])
        raise ConfigError(f"channel {k} of the training images of {where} has standard deviation {std[k]:g} "
                          f"(every value {mean[k]:g}): it cannot be normalized; give mean and std instead",
                          key="normalize")
    return tuple(float(m * s) for m in mean), tuple(float(d * abs(s)) for d in std)


def per_channel(values, ndim, dtype):
    """``values`` (1 or C numbers) as an array of ``dtype`` that broadcasts over the channel axis
    of an ``(n, C, *spatial)`` array of ``ndim`` axes."""
    return np.asarray(values, dtype=dtype).reshape((1, -1) + (1,) * (ndim - 2))


class Scaler:
    """The affine map from stored values to the model's dtype (module docstring).

    ``scale``: float; ``mean``, ``std``: tuples of 1 or C floats (or None).
    """

    def __init__(self, scale=1.0, mean=None, std=None):
        self.scale = float(scale)
        self.mean = mean
        self.std = std

    @classmethod
    def for_data(cls, scale, mean, std, stored_dtype, channels, where):
        """The scaler for data of ``stored_dtype`` with ``channels`` channels read from
        ``where`` (a file name, for messages). Refuses integer data without ``scale``
        (ConfigError naming the key) and ``mean``/``std`` of the wrong length."""
        kind = np.dtype(stored_dtype).kind
        if scale is None:
            if kind in "biu":
                raise ConfigError(
                    f"{where} stores {np.dtype(stored_dtype)} values: set scale to say how they become "
                    "floats, e.g. scale: 0.00392156862745098 (1/255) for pixels 0..255, or scale: 1 "
                    "to use them as stored", key="scale")
            scale = 1.0
        for key, v in (("mean", mean), ("std", std)):
            if v is not None and len(v) not in (1, channels):
                raise ConfigError(f"give 1 or {channels} values (the images of {where} have "
                                  f"{channels} channels), got {len(v)}", key=key)
        return cls(scale, mean, std)

    def apply_into(self, raw, out):
        """``out[...] = scaled raw`` (``raw`` ``(n, C, h, w)`` or ``(n, C, d, h, w)`` as stored, ``out`` of the float
        dtype); the scale is one pass: the ufunc casts ``raw`` to ``out``'s dtype and multiplies
        in it, the same values as ``raw.astype(dtype) * scale``."""
        dtype = out.dtype
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # checked after: check_scaled
            if self.scale != 1.0:
                np.multiply(raw, dtype.type(self.scale), out=out, dtype=dtype, casting="unsafe")
            else:
                np.copyto(out, raw, casting="unsafe")
            if self.mean is not None:
                out -= per_channel(self.mean, out.ndim, dtype)
            if self.std is not None:
                out /= per_channel(self.std, out.ndim, dtype)
        return out

    def overflow_error(self, raw, dtype, where, image=None):
        """The ConfigError for finite stored values ``raw`` ``(n, C, h, w)`` (image ``image`` of
        ``where``; None: ``raw`` is the stored type's range) that this scaling turns into inf or
        NaN in ``dtype``: it names the key whose step (in :meth:`apply_into`'s order) does it,
        and the values (key None when ``dtype`` cannot hold them as stored); None if none does."""
        dtype = np.dtype(dtype)
        steps = (("scale", self.scale, lambda v: v * dtype.type(self.scale)),
                 ("mean", self.mean, lambda v: v - per_channel(self.mean, v.ndim, dtype)),
                 ("std", self.std, lambda v: v / per_channel(self.std, v.ndim, dtype)))
        what = (f"holds finite values ({raw.min():g} .. {raw.max():g} in image {image})" if image is not None
                else f"stores {raw.dtype} values ({raw.min()} .. {raw.max()})")
        largest = f"largest {np.finfo(dtype).max:.3g}"
        with np.errstate(all="ignore"):
            x = raw.astype(dtype)
            if not np.isfinite(x).all():    # cast before scale (apply_into): no scale helps
                return ConfigError(f"{where} {what} that {dtype} cannot hold ({largest}): store them "
                                   "scaled into its range, or use a float64 backend (dtype: float64)")
            key = value = None
            for k, v, step in steps:
                if key is None and v is not None:
                    x = step(x)
                    key, value = (k, v) if not np.isfinite(x).all() else (None, None)
        if key is None:
            return None
        shown = value[0] if isinstance(value, tuple) and len(value) == 1 else (
            list(value) if isinstance(value, tuple) else value)
        return ConfigError(
            f"{where} {what} but {key} {shown!r} turns them into inf or NaN in {dtype} ({largest}): "
            f"the data are fine; choose scale, mean and std that keep (x * scale - mean) / std "
            f"finite ({self.describe()})", key=key)

    def describe(self):
        parts = [f"scale {self.scale!r}"]
        if self.mean is not None:
            parts.append(f"mean {list(self.mean)}")
        if self.std is not None:
            parts.append(f"std {list(self.std)}")
        return ", ".join(parts)


def check_int_range(source_dtype, channels, dtype, where, scaler):
    """For integer data (not read in full before a streamed run): whether ``scaler`` keeps every
    value the type can store finite in ``dtype`` (True: nothing more to check). If it does not,
    types of at most 16 bits raise the ConfigError of :meth:`Scaler.overflow_error` (a scale
    that overflows 65535 is not meant for pixels); wider types (int32, int64, ...) return False:
    their range is far wider than the data's as a rule, so the caller checks the values stored
    (:func:`~.stream.check_source_finite`). Non-integer types: True."""
    source_dtype = np.dtype(source_dtype)
    if source_dtype.kind not in "iu":
        return True
    info = np.iinfo(source_dtype)
    raw = np.empty((2, channels, 1, 1), source_dtype)
    raw[0], raw[1] = info.min, info.max
    err = scaler.overflow_error(raw, dtype, where)
    if err is None:
        return True
    if source_dtype.itemsize <= 2:
        raise err
    return False


def check_scaled(x, where, rows, read_raw, scaler):
    """After scaling: if the float ``x`` ``(n, C, h, w)`` (file rows ``rows``) holds NaN or inf,
    DataError (:func:`check_finite`) when the stored values of the first such image do too
    (``read_raw(i)``: image ``i`` of ``x`` as stored, ``(1, C, h, w)``), else the ConfigError
    of :meth:`Scaler.overflow_error`: the data are finite, ``scale``/``mean``/``std`` are not."""
    bad = ~np.isfinite(x.reshape(len(x), -1)).all(axis=1)
    if not bad.any():
        return
    i = int(np.argmax(bad))
    raw = read_raw(i)
    row = int(rows[i])
    if raw.dtype.kind == "f":
        check_finite(raw, where, rows=[row])
    raise scaler.overflow_error(raw, x.dtype, where, row) or DataError(
        f"{where}: image {row} becomes NaN or inf when scaled ({scaler.describe()})")


def check_finite(x, where, first_row=0, rows=None):
    """DataError naming ``where`` and the first image holding NaN or inf in float ``x``."""
    if x.dtype.kind != "f":
        return
    bad = ~np.isfinite(x.reshape(len(x), -1)).all(axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        image = int(rows[i]) if rows is not None else first_row + i
        raise DataError(f"{where} holds NaN or inf values (image {image}); clean the data or "
                        "drop those images")
