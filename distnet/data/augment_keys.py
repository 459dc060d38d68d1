"""The YAML mapping of a dataset's ``augment`` key, checked entry by entry into the arguments of
:class:`~distnet.data.augment.Augmentation` (docs/data.md#augmentation). Every mistake is a
:class:`~distnet.errors.ConfigError` of the key ``augment`` naming the entry; what needs the
data's shape (a padding per axis, a flip of an axis the images lack, quarter turns of a plane
that is not square) is checked when the data are loaded (:meth:`Augmentation.check_plane
<distnet.data.augment.Augmentation.check_plane>`)."""
import math
import numbers

import numpy as np

from ..errors import ConfigError

#: The values of ``crop: {mode: ...}``.
PAD_MODES = ("constant", "reflect", "edge")
#: The named values of ``flip`` and the axes they flip (a list of axis letters also works;
#: ``all``: every spatial axis the images have).
FLIPS = {"horizontal": "x", "vertical": "y", "both": "yx", "all": "all"}
#: The interpolations of ``resized_crop`` (masks always take ``nearest``).
INTERPOLATIONS = ("linear", "nearest")
#: torchvision's ``RandomResizedCrop`` defaults.
DEFAULT_SCALE, DEFAULT_RATIO = (0.08, 1.0), (3 / 4, 4 / 3)
KEYS = ("crop", "flip", "resized_crop", "rotate90", "brightness", "contrast", "seed")


def bad(message):
    return ConfigError(message, key="augment")


def _is_int(v):
    return not isinstance(v, bool) and isinstance(v, numbers.Integral)


def _is_number(v):
    return not isinstance(v, bool) and isinstance(v, numbers.Real) and math.isfinite(float(v))


def _only(value, allowed, entry):
    unknown = [k for k in value if k not in allowed]
    if unknown:
        raise bad(f"unknown key {unknown[0]!r} in augment: {entry}; valid keys: {', '.join(allowed)}")


def parse_crop(crop):
    """``crop: p`` or ``{padding: p (or one per spatial axis), mode, fill}`` -> keyword arguments."""
    if not isinstance(crop, dict):
        crop = {"padding": crop}
    _only(crop, ("padding", "mode", "fill"), "crop")
    p = crop.get("padding")
    pads = p if isinstance(p, (list, tuple)) else [p]
    if not pads or not all(_is_int(v) and v >= 0 for v in pads):
        raise bad(f"augment: crop padding must be an integer >= 0 (or one per spatial axis), got {p!r}")
    mode = crop.get("mode", "constant")
    if mode not in PAD_MODES:
        raise bad(f"augment: crop mode must be one of {', '.join(PAD_MODES)}, got {mode!r}")
    fill = crop.get("fill", 0)
    if not _is_number(fill):
        raise bad(f"augment: crop fill must be a finite number, got {fill!r}")
    padding = tuple(int(v) for v in pads) if isinstance(p, (list, tuple)) else int(p)
    return {"padding": padding, "mode": mode, "fill": float(fill)}


def parse_flip(flip):
    """``flip``: a name of :data:`FLIPS` or a list of axis letters -> ``{"flips": letters of "zyx",
    or "all"}``."""
    letters = FLIPS.get(flip) if isinstance(flip, str) else None
    if isinstance(flip, (list, tuple)) and flip and all(isinstance(a, str) and a in ("z", "y", "x") for a in flip):
        letters = "".join(a for a in "zyx" if a in flip)
    if letters is None:
        raise bad(f"augment: flip must be one of {', '.join(FLIPS)} or a list of axes such as [z, y, x], got {flip!r}")
    return {"flips": letters}


def _range(value, entry, low, high=None):
    """A ``[a, b]`` pair of numbers with ``low < a <= b`` (``<= high``)."""
    ok = (isinstance(value, (list, tuple)) and len(value) == 2 and all(_is_number(v) for v in value)
          and low < value[0] <= value[1] and (high is None or value[1] <= high))
    if not ok:
        limit = f"{low} < a <= b" + (f" <= {high}" if high is not None else "")
        raise bad(f"augment: resized_crop {entry} must be a pair [a, b] with {limit}, got {value!r}")
    return (float(value[0]), float(value[1]))


def parse_resized_crop(value):
    """``resized_crop: true`` or ``{scale: [a, b], ratio: [a, b], interpolation}`` -> keyword arguments."""
    if value is True:
        value = {}
    if value is False or value is None:
        return {}
    if not isinstance(value, dict):
        raise bad(f"augment: resized_crop must be true or a mapping such as {{scale: [0.08, 1]}}, got {value!r}")
    _only(value, ("scale", "ratio", "interpolation"), "resized_crop")
    interpolation = value.get("interpolation", "linear")
    if interpolation not in INTERPOLATIONS:
        raise bad(f"augment: resized_crop interpolation must be one of {', '.join(INTERPOLATIONS)}, "
                  f"got {interpolation!r}")
    return {"resized_crop": (_range(value.get("scale", DEFAULT_SCALE), "scale", 0, 1),
                             _range(value.get("ratio", DEFAULT_RATIO), "ratio", 0), interpolation)}


def parse_jitter(value, entry):
    """``brightness: b`` / ``contrast: c`` (or ``{range: c, center: m}``) -> ``(range, center)``."""
    center = 0.0
    if isinstance(value, dict) and entry == "contrast":
        _only(value, ("range", "center"), entry)
        center = value.get("center", 0.0)
        if not _is_number(center):
            raise bad(f"augment: contrast center must be a finite number, got {center!r}")
        value = value.get("range")
    if not _is_number(value) or value < 0:
        raise bad(f"augment: {entry} must be a number >= 0 (factors drawn in [max(0, 1 - v), 1 + v]), got {value!r}")
    return float(value), float(center)


def parse(value):
    """The keyword arguments of :class:`~distnet.data.augment.Augmentation` for the YAML value
    of ``augment`` (a mapping); None when it draws nothing (None, ``{}``, ``crop: 0``)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad(f"expected a mapping such as {{crop: 4, flip: horizontal}}, got {value!r}")
    unknown = [k for k in value if k not in KEYS]
    if unknown:
        raise bad(f"unknown key {unknown[0]!r} in augment; valid keys: {', '.join(KEYS)}")
    kw = {}
    if value.get("crop") is not None:
        kw.update(parse_crop(value["crop"]))
    if value.get("flip") is not None:
        kw.update(parse_flip(value["flip"]))
    kw.update(parse_resized_crop(value.get("resized_crop")))
    turns = value.get("rotate90", False)
    if not isinstance(turns, bool):
        raise bad(f"augment: rotate90 must be true or false, got {turns!r}")
    kw["rotate90"] = turns
    for entry in ("brightness", "contrast"):
        if value.get(entry) is not None:
            kw[entry], center = parse_jitter(value[entry], entry)
            if entry == "contrast":
                kw["center"] = center
    seed = value.get("seed")
    if seed is not None:
        if not _is_int(seed):
            raise bad(f"augment: seed must be an integer, got {seed!r}")
        kw["seed"] = int(seed)
    if not (np.any(kw.get("padding", 0)) or kw.get("flips") or kw.get("resized_crop") or turns
            or kw.get("brightness") or kw.get("contrast")):
        return None     # nothing random: the training images as stored
    return kw


__all__ = ["DEFAULT_RATIO", "DEFAULT_SCALE", "FLIPS", "INTERPOLATIONS", "KEYS", "PAD_MODES", "parse"]
