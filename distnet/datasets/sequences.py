"""The dataset an experiment names for sequence-to-sequence data: :class:`SequenceDataset`, a file
in the sequence layout of :mod:`distnet.data.sequences` or the number task generated in memory."""
import json

import numpy as np

from ..config.builder import config_error
from ..config.types import Bounded, PositiveInt
from ..data.sequences import SPECIALS, write_numbers
from ..errors import ConfigError, DataError


class SequenceDataset:
    """Keys: ``path`` (an HDF5 file in the sequence layout of docs/parallelism.md#seq2seq-across-ranks: padded
    token ids + lengths + vocabularies), or ``generate: numbers`` to build the
    shipped number task in memory (then ``digits`` (default 4), ``n_train`` (12000), ``n_test``
    (1000), ``seed`` (0)): every digit count 1 .. digits gets ``n // digits`` numbers, so a split
    holds a multiple of ``digits`` (``n_train``, ``n_test``: ``digits`` .. 10,000,000), and
    the test numbers are distinct and at most a fifth of each digit count's numbers (2 of the
    10 one-digit numbers, ...): the default task has 450 test sentences, as ``distnet check``
    says); ``max_src_len`` / ``max_tgt_len``: the declared maxima (sequences
    longer than these are refused; default: what the data holds)."""

    config_types = {"path": str, "generate": str, "digits": int, "n_train": PositiveInt, "n_test": PositiveInt,
                    "seed": Bounded(int, 0, 2**32 - 1), "max_src_len": PositiveInt, "max_tgt_len": PositiveInt}
    #: Most numbers ``generate`` makes for one split (the generator is plain Python: ~10 s per million).
    MAX_GENERATED = 10_000_000
    dist_flag = False
    dist_mode = None

    def __init__(self, path=None, generate=None, digits=4, n_train=12000, n_test=1000, seed=0,
                 max_src_len=None, max_tgt_len=None):
        if (path is None) == (generate is None):
            raise ConfigError("give either path (a sequence HDF5 file) or generate: numbers", key="path")
        if generate is not None and generate != "numbers":
            raise ConfigError(f"generate: the shipped task is 'numbers', got {generate!r}", key="generate")
        if not 1 <= digits <= 6:
            raise ConfigError(f"digits must be 1 .. 6, got {digits}", key="digits")
        for name, n in (("n_train", n_train), ("n_test", n_test)):
            if generate is not None and n < digits:
                raise ConfigError(f"{name} must be at least digits ({digits}): every digit count gets "
                                  f"{name} // digits numbers, got {n}", key=name)
            if generate is not None and n > self.MAX_GENERATED:
                raise ConfigError(f"{name} must be at most {self.MAX_GENERATED} for the generated task, got {n} "
                                  "(write a file with `distnet data convert` for more)", key=name)
        self.path, self.generate = path, generate
        self.digits, self.n_train, self.n_test, self.seed = digits, n_train, n_test, seed
        self.max_src_len, self.max_tgt_len = max_src_len, max_tgt_len
        self._data = None

    def preprocessing(self):
        """None: token ids need no preprocessing a checkpoint must keep."""
        return None

    def class_names(self):
        """None: a sequence's tokens are no classes of images."""
        return None

    def fingerprint(self):
        """What every rank must read alike (:mod:`~distnet.data.fingerprints`): both vocabularies
        and, per split, every array's shape and a CRC-32 of its values (the data is in memory
        already)."""
        from ..data.fingerprints import crc, shape_text
        data = self.load()
        vocab = json.dumps([self.src_vocab, self.tgt_vocab]).encode()
        out = [("vocabularies", f"{len(self.src_vocab)} + {len(self.tgt_vocab)} words",
                crc(np.frombuffer(vocab, np.uint8)))]
        for split, arrays in sorted(data.items()):
            out += [(f"{split} {name}", shape_text(a.shape, a.dtype), crc(a))
                    for name, a in zip(("src", "src_len", "tgt", "tgt_len"), arrays)]
        return out

    def check_same_data(self, comm):
        """Collective over ``comm``: a DataError on every rank when some ranks read another
        sequence file than rank 0 (:func:`~distnet.data.fingerprints.same_data`)."""
        from ..data.fingerprints import same_data
        same_data(self.fingerprint(), comm, self.path or "the generated numbers")

    def load(self):
        """``{split: (src, src_len, tgt, tgt_len)}`` numpy int arrays, plus vocabularies in
        ``self.src_vocab`` / ``self.tgt_vocab``. Checks lengths and ids (DataError)."""
        if self._data is not None:
            return self._data
        if self.generate:
            import io
            buf = io.BytesIO()
            write_numbers(buf, self.digits, self.n_train, self.n_test, self.seed)
            buf.seek(0)
            source = buf
        else:
            source = self.path
        import h5py
        where = self.path or "generated numbers"
        try:
            with h5py.File(source, "r") as f:
                self.src_vocab = json.loads(f.attrs["src_vocab"])
                self.tgt_vocab = json.loads(f.attrs["tgt_vocab"])
                data = {s: tuple(np.asarray(f[f"{s}/{k}"]).astype(np.int64)
                                 for k in ("src", "src_len", "tgt", "tgt_len"))
                        for s in ("train", "test") if s in f}
        except (OSError, KeyError) as e:
            raise DataError(f"{where}: not a sequence HDF5 file ({e})") from None
        for v, name in ((self.src_vocab, "src_vocab"), (self.tgt_vocab, "tgt_vocab")):
            if v[:4] != SPECIALS:
                raise DataError(f"{where}: {name} must begin with {SPECIALS}, got {v[:4]}")
        for split, (s, sl, t, tl) in data.items():
            for ids, lens, vocab, limit, what in ((s, sl, self.src_vocab, self.max_src_len, "src"),
                                                  (t, tl, self.tgt_vocab, self.max_tgt_len, "tgt")):
                if limit is not None and lens.max() > limit:
                    n = int(np.argmax(lens > limit))     # the first one too long
                    raise config_error(self, f"{where}: {split}/{what} sequence {n} has {lens[n]} tokens"
                                       f"{' with its <eos>' if what == 'tgt' else ''}, more than max_{what}_len"
                                       f" = {limit}", f"max_{what}_len")
                if ids.min() < 0 or ids.max() >= len(vocab):
                    raise DataError(f"{where}: {split}/{what} has token id {int(ids.max())} outside "
                                    f"its vocabulary of {len(vocab)}")
        self._data = data
        return data
