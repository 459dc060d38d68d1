"""The geometry of the flat-shift kernel (:mod:`.flat`) for any number of spatial axes: an image
``(C, *spatial)`` read as the matrix ``(C, prod(spatial))`` is a sequence of *rows* of the last
axis (pitch ``W``); a filter tap's input for a run of output positions is one contiguous slice.

* **Rows.** The output positions are laid out on the input's grid (a *wide* output): row ``r``
  of output pixels ``r*W ... r*W + W - 1``, the last ``(fw - 1)*dx`` of them garbage. In 2-D the
  rows are the ``Ho`` output rows; in a volume ``(D, H, W)`` the wide rows are ``r = z*H + y``
  for ``z < Do``, and rows ``y >= Ho`` of each plane are garbage too (computed and dropped, a
  fraction ``(fh - 1)*dy / H`` of the work), so that a tile of consecutive rows may run across
  planes: the GEMMs stay wide on small planes.
* **Taps.** A tap ``(..., u, v)`` reads ``x_flat[r*W + lead*W + u*dy*W + v*dx + l]``: ``v`` shifts
  the columns, ``u`` the rows, and the taps of the leading axes (``z`` of a volume) add a
  *lead* row offset each (``a*dz*H`` rows): to the tile's im2col they are channels of their
  own, read from other rows.
* **Lines** (1 axis) are images of one row.

:class:`RowGeometry` holds this for one call; its :meth:`~RowGeometry.blocks` say where the valid
rows of a tile go in the ``(K, *out)`` output. A 2-D image has one lead (0) and no garbage row,
so the kernel does exactly what it did for planes.
"""
import itertools
import math

from ..windows import extents, output_shape


class RowGeometry:
    """The flat-shift geometry of a stride-1 correlation of an image of ``spatial`` (already
    padded) with a filter of ``fshape`` at ``dilation`` (one int per axis).

    W : row pitch (the last axis); fh, fw, dy, dx : the row and column taps and their dilation;
    leads : the row offsets of the taps of the axes before the last two (C order; ``(0,)`` in
    2-D); out : the output's spatial shape; rows : wide output rows to compute (the last valid
    row's index + 1); Wo : valid pixels per row.
    """

    def __init__(self, spatial, fshape, dilation):
        spatial, fshape, dilation = tuple(spatial), tuple(fshape), tuple(dilation)
        self.nd = len(spatial)
        self.out = output_shape(spatial, fshape, (1,) * self.nd, dilation)
        if self.nd == 1:            # a line is an image of one row
            spatial, fshape, dilation = (1,) + spatial, (1,) + fshape, (1,) + dilation
        self.spatial = spatial
        self.W, self.fh, self.fw = spatial[-1], fshape[-2], fshape[-1]
        self.dy, self.dx = dilation[-2], dilation[-1]
        out = output_shape(spatial, fshape, (1,) * len(spatial), dilation)
        self.H, self.Ho, self.Wo = spatial[-2], out[-2], out[-1]
        self.planes = out[:-2]                  # the leading output axes
        pitch = [math.prod(spatial[i + 1:-1]) for i in range(len(spatial) - 2)]   # in rows
        self.leads = tuple(sum(a * d * p for a, d, p in zip(tap, dilation, pitch))
                           for tap in itertools.product(*map(range, fshape[:-2])))
        last = sum((o - 1) * p for o, p in zip(self.planes, pitch))
        self.rows = last + self.Ho
        self.garbage_cols = (self.fw - 1) * self.dx
        self.row_halo = (self.fh - 1) * self.dy

    @property
    def taps(self):
        """Filter taps of the leading axes (as many channels of their own in a tile)."""
        return len(self.leads)

    def span(self, m):
        """Wide positions a tile of ``m`` rows computes (the last row's garbage columns would
        read past the image)."""
        return m * self.W - self.garbage_cols

    def blocks(self, r0, m):
        """The valid rows of the tile of wide rows ``r0 ... r0 + m - 1``: ``(t0, t1, index)``
        per run of them in one plane, ``t0:t1`` the tile's rows and ``index`` where they go in
        a ``(K, *out)`` output (its last axis left out: the first ``Wo`` columns of each row)."""
        H, Ho = self.H, self.Ho
        for q in range(r0 // H, (r0 + m - 1) // H + 1):
            lead = _unravel(q, self.spatial[:-2])
            if any(i >= o for i, o in zip(lead, self.planes)):
                continue
            y0, y1 = max(r0 - q * H, 0), min(r0 + m - q * H, Ho)
            if y1 > y0:
                yield q * H + y0 - r0, q * H + y1 - r0, (slice(None),) + lead + (slice(y0, y1),)

    def rows_view(self, a):
        """``a (K, *out)`` as ``(K, *out2)`` with at least a row axis (a line: one row)."""
        return a[:, None] if self.nd == 1 else a


def _unravel(q, shape):
    """The C-order multi-index of the flat index ``q`` in ``shape`` (``()`` for no axes)."""
    out = []
    for n in reversed(shape):
        q, i = divmod(q, n)
        out.append(i)
    return tuple(reversed(out))


def full_correlation(spatial, fshape, dilation, crop):
    """The geometry of a data gradient by the flat kernel: ``dz`` (the output gradient) written
    into a zero-bordered image whose full correlation with the flipped filters is the kept part
    of ``dx``. Returns ``(image, offset, kept)``: the dz image's spatial shape, where ``dz``
    starts in it (per axis) and the shape of ``dx`` after ``crop`` (``((before, after), ...)``,
    each at most the window's extent - 1)."""
    ext = [e - 1 for e in extents(fshape, dilation)]
    out = [n - e for n, e in zip(spatial, ext)]
    offset = tuple(e - lo for e, (lo, _) in zip(ext, crop))
    image = tuple(o + p + e - hi for o, p, e, (_, hi) in zip(out, offset, ext, crop))
    kept = tuple(n - lo - hi for n, (lo, hi) in zip(spatial, crop))
    return image, offset, kept
