"""Which rank counts can cut a set of planes: divisor pairs and the sizes that fit, in time
``O(sqrt(n))`` per rank count (``distnet show -n 1000000`` answers at once).

A grid ``Py x Px`` cuts every plane ``(H, W)`` into non-empty tiles exactly when
``Py <= min H`` and ``Px <= min W``; so a rank count ``n`` works when some divisor ``py`` of
``n`` lies in ``[ceil(n / Wmin), Hmin]``. Pure integer math, no MPI.
"""
import math


def divisor_pairs(n):
    """All ``(Py, Px)`` with ``Py * Px == n``, ``Py`` ascending; ``O(sqrt(n))``."""
    low, high = [], []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            low.append((d, n // d))
            if d != n // d:
                high.append((n // d, d))
    return low + high[::-1]


def fits(n, hmax, wmax):
    """Whether ``n`` ranks have a grid ``Py x Px`` with ``Py <= hmax`` and ``Px <= wmax``
    (``None``: no limit on that axis)."""
    if hmax is None and wmax is None:
        return True
    lo = 1 if wmax is None else -(-n // wmax)
    hi = n if hmax is None else min(hmax, n)
    if lo > hi:
        return False
    if hi - lo < math.isqrt(n):  # few candidates: try them
        return any(n % py == 0 for py in range(lo, hi + 1))
    return any(lo <= py <= hi for py, _ in divisor_pairs(n))


def fitting_sizes(hmax, wmax, upto, near=None, around=5, head=64):
    """Rank counts ``1 <= n <= upto`` that fit (see :func:`fits`): all of them up to ``head``,
    and, when ``near`` is given, the ``around`` nearest below and above ``near``. Sorted.

    Never scans past ``hmax * wmax`` (the largest count that can fit), so a huge ``upto`` costs
    only the sizes listed and the gaps between them.
    """
    top = upto if hmax is None or wmax is None else min(upto, hmax * wmax)
    out = {n for n in range(1, min(head, top) + 1) if fits(n, hmax, wmax)}
    if near is not None:
        found, n = 0, min(near, top)
        while n > head and found < around:
            if fits(n, hmax, wmax):
                out.add(n)
                found += 1
            n -= 1
        found, n = 0, max(near + 1, head + 1)
        while n <= top and found < around:
            if fits(n, hmax, wmax):
                out.add(n)
                found += 1
            n += 1
    return sorted(out)
