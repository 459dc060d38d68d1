"""Constrained value types for ``config_types``: sizes, rates and ranges checked by the builder
when the experiment is built (so ``distnet check`` and every rank before training refuse them
with file:line:key), instead of by each constructor, or in the middle of training.

A class declares them next to the plain types::

    config_types = {"nofm": PositiveInt, "learning_rate": NonNegative, "weight_init": WEIGHT_INIT}

Every number a spec accepts is finite (YAML's ``.nan`` / ``.inf`` are refused); so is every
plain ``float`` key (see ``builder.coerce``). ``None`` (a key left at its default) is accepted.
"""
import math
import reprlib

_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, 60, 60
_SHORT.maxlist = _SHORT.maxdict = _SHORT.maxtuple = _SHORT.maxset = 6


def short_repr(value):
    """``repr(value)`` cut short (reprlib: a few items, levels and characters), so that an error
    message never walks or prints a large value."""
    return _SHORT.repr(value)


def describe(value):
    """A short description of a YAML value for error messages."""
    return f"{short_repr(value)} ({type(value).__name__})"


def check_finite(value, what="a number"):
    """``value`` as a float when it is a finite int/float (not a bool); ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected {what}, got {describe(value)}")
    try:
        out = float(value)
    except OverflowError:  # an int with hundreds of digits
        raise ValueError(f"expected {what}, got an integer too large for a float") from None
    if not math.isfinite(out):
        raise ValueError(f"expected {what}, got {value!r} (numbers must be finite)")
    return out


#: Largest size (a count of maps, units, pixels) an int key may give: beyond it no array of
#: that size can be allocated, and numpy's errors would come late and as tracebacks.
SIZE_CAP = 2**31 - 1


class Bounded:
    """An int or a finite number in ``[low, high]`` (``open_low``: ``low`` excluded,
    ``open_high``: ``high`` excluded). ``cap``: a sanity limit on ints, not shown in the
    reference (:data:`SIZE_CAP` for sizes)."""

    def __init__(self, base, low=None, high=None, open_low=False, cap=None, open_high=False):
        assert base in (int, float)
        self.base, self.low, self.high, self.open_low, self.cap = base, low, high, open_low, cap
        self.open_high = open_high

    def describe(self):
        word = "int" if self.base is int else "number"
        if self.low is not None and self.high is not None:
            return (f"{word} in {'(' if self.open_low else '['}{self.low}, "
                    f"{self.high}{')' if self.open_high else ']'}")
        if self.low is not None:
            return f"{word} {'>' if self.open_low else '>='} {self.low}"
        if self.high is not None:
            return f"{word} {'<' if self.open_high else '<='} {self.high}"
        return f"finite {word}" if self.base is float else word

    __str__ = __repr__ = describe

    def coerce(self, value):
        """``value`` (an int for int specs, a float for number specs) or ValueError."""
        if self.base is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"expected an integer, got {describe(value)}")
        else:
            value = check_finite(value)
        too_low = self.low is not None and (value <= self.low if self.open_low else value < self.low)
        too_high = self.high is not None and (value >= self.high if self.open_high else value > self.high)
        if too_low or too_high:
            raise ValueError(f"expected {self.describe()}, got {short_repr(value)}")
        if self.cap is not None and value > self.cap:
            raise ValueError(f"{short_repr(value)} is too large (more than {self.cap}: no array can "
                             "have that size here)")
        return value


#: Sizes and counts that must be at least 1 (nofm, nout, batch_size, ...).
PositiveInt = Bounded(int, 1, cap=SIZE_CAP)
#: Counts that may be 0 (num_epochs, padding, epochs of a schedule, ...).
NonNegativeInt = Bounded(int, 0, cap=SIZE_CAP)
#: Rates and scales that may be 0 (a learning rate of 0 freezes a layer) but not negative.
NonNegative = Bounded(float, 0)
#: Strictly positive numbers.
Positive = Bounded(float, 0, open_low=True)
#: Any finite number.
Finite = Bounded(float)
#: Fractions in [0, 1].
Fraction = Bounded(float, 0, 1)
#: Fractions in [0, 1): decay coefficients (momentum, Adam's betas: at 1 nothing decays, the
#: velocity sums every gradient ever seen, and above 1 it grows geometrically: training diverges
#: without an error) and dropout's probability (at 1 every unit is dropped).
HalfOpenFraction = Bounded(float, 0, 1, open_high=True)


class Shape:
    """An int or a list of 1 to 3 ints (``[cols]``, ``[rows, cols]``, ``[depth, rows, cols]``),
    each >= ``low``. An int stays an int: the layer broadcasts it to its input's number of
    spatial axes (a list must have that many entries); a list becomes a tuple."""

    def __init__(self, low):
        self.low = low

    def describe(self):
        return f"int, [rows, cols] or [depth, rows, cols], each >= {self.low}"

    __str__ = __repr__ = describe

    def coerce(self, value):
        if isinstance(value, int) and not isinstance(value, bool):
            sizes = value
        elif (isinstance(value, (list, tuple)) and 1 <= len(value) <= 3
              and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
            sizes = tuple(value)
        else:
            raise ValueError(f"expected an integer or a list [rows, cols] or [depth, rows, cols] of "
                             f"integers, got {describe(value)}")
        values = (sizes,) if isinstance(sizes, int) else sizes
        if min(values) < self.low:
            raise ValueError(f"expected sizes >= {self.low}, got {short_repr(value)}")
        if max(values) > SIZE_CAP:
            raise ValueError(f"{short_repr(value)} is too large (more than {SIZE_CAP})")
        return sizes


#: Filter sizes, strides, dilations, image sizes.
PositiveShape = Shape(1)


class GridShape(Shape):
    """A process grid: an int N (N x N), a list of 1 to 3 ints (``[Px]``, ``[Py, Px]``,
    ``[Pz, Py, Px]``), or the same written ``"2x4"`` / ``"2x2x2"``; each >= 1.
    Normalised to a tuple (its number of axes is checked against the model's arrays when the run
    is laid out)."""

    def __init__(self):
        super().__init__(1)

    def describe(self):
        return 'int, [Py, Px] or [Pz, Py, Px] (or [Px], "2x2x2"), each >= 1'

    __str__ = __repr__ = describe

    def coerce(self, value):
        if isinstance(value, str):
            try:
                parts = [int(p) for p in value.lower().split("x")]
            except ValueError:
                parts = []
            if not 2 <= len(parts) <= 3:
                raise ValueError(f'expected a grid written like "2x4" or "2x2x2", got {short_repr(value)}')
            value = parts
        if isinstance(value, int) and not isinstance(value, bool):
            grid = (value, value)
        elif (isinstance(value, (list, tuple)) and 1 <= len(value) <= 3
              and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
            grid = tuple(value)
        else:
            raise ValueError(f"expected an integer or a list [Py, Px] or [Pz, Py, Px] of integers, "
                             f"got {describe(value)}")
        if min(grid) < 1:
            raise ValueError(f"expected sizes >= 1, got {short_repr(value)}")
        if max(grid) > SIZE_CAP:
            raise ValueError(f"{short_repr(value)} is too large (more than {SIZE_CAP})")
        return grid


#: The experiment's ``grid``.
ProcessGrid = GridShape()
#: Paddings.
NonNegativeShape = Shape(0)


class MappingOf:
    """A mapping whose numeric entries have specs (``fields``: key -> :class:`Bounded`), and
    ``ordered`` pairs ``(a, b)`` that must satisfy ``a <= b`` when both are given. Other keys are
    left to the class that reads the mapping (which names the valid ones)."""

    def __init__(self, fields, ordered=()):
        self.fields, self.ordered = dict(fields), tuple(ordered)

    def describe(self):
        return "mapping"

    __str__ = __repr__ = describe

    def coerce(self, value):
        if not isinstance(value, dict):
            raise ValueError(f"expected a mapping, got {describe(value)}")
        out = dict(value)
        for key, spec in self.fields.items():
            if out.get(key) is not None:
                try:
                    out[key] = spec.coerce(out[key])
                except ValueError as e:
                    raise ValueError(f"{key}: {e}") from None
        for a, b in self.ordered:
            if out.get(a) is not None and out.get(b) is not None and out[a] > out[b]:
                raise ValueError(f"{a} ({out[a]!r}) is larger than {b} ({out[b]!r})")
        return out


#: A layer's ``weight_init`` (its ``type`` and key names are checked by the layer).
WEIGHT_INIT = MappingOf({"low": Finite, "high": Finite, "loc": Finite, "scale": NonNegative,
                         "bias_init": Finite}, ordered=[("low", "high")])
#: A model's ``momentum`` schedule (its ``type`` and key names are checked by the schedule).
MOMENTUM = MappingOf({"coef": HalfOpenFraction, "initial_coef": HalfOpenFraction,
                      "saturated_coef": HalfOpenFraction,
                      "start_epoch": NonNegativeInt, "saturate_epoch": NonNegativeInt},
                     ordered=[("start_epoch", "saturate_epoch")])
