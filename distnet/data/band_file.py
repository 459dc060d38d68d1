"""A mask file written band by band (``distnet predict``'s masks): opened, fed its bands in
order by a subclass's ``write_rows``, and finished by :meth:`BandFile.close`, which checks that
every band came; :class:`~distnet.data.mask_png.PalettePNG` and
:class:`~distnet.data.mask_npy.NpyMask` are its kinds."""


class BandFile:
    """The file ``path`` of ``total`` rows (a volume's slices: ``unit``) along the first axis;
    a subclass counts the rows it writes in ``rows`` and gives its last bytes in
    :meth:`trailer`."""

    unit = "rows"

    def __init__(self, path, total):
        self.path, self.total, self.rows = path, int(total), 0
        self._f = open(path, "wb")

    def trailer(self):
        """The bytes that end the file once every row is written."""
        return b""

    def discard(self):
        """Close the file unfinished (an error midway: the caller's failure is what is said)."""
        if self._f is not None:
            self._f.close()
            self._f = None

    def close(self):
        """Write the :meth:`trailer` and close the file (ValueError when rows are missing)."""
        if self._f is None:
            return
        try:
            if self.rows != self.total:
                raise ValueError(f"{self.path}: {self.rows} of {self.total} {self.unit} written")
            self._f.write(self.trailer())
        finally:
            self._f.close()
            self._f = None
