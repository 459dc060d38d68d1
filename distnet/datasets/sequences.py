"""Sequence-to-sequence data: the HDF5 layout, the shipped number-words task, and the dataset
class an experiment names.

HDF5 layout (one file; ``S`` = ``train`` or ``test``)::

    S/src      (N, Ts) int32   source token ids, padded with <pad> (id 0) after each sequence
    S/src_len  (N,)    int32   source lengths (tokens before the padding), 1 .. Ts
    S/tgt      (N, Tt) int32   target token ids ending with <eos>, padded with <pad>
    S/tgt_len  (N,)    int32   target lengths including the <eos>
    attrs: src_vocab, tgt_vocab   JSON lists of tokens; id = position; both begin with
           <pad>, <unk>, <bos>, <eos> (ids 0 .. 3)

The shipped task (:func:`write_numbers`): a number 0 .. 10^digits - 1 written in digits, one
token per digit (``3 0 7``), to the same number in English words (``three hundred seven``).
Deterministic given its seed; held-out numbers never appear in training.
"""
import json

import numpy as np

from ..config.builder import config_error
from ..config.types import Bounded, PositiveInt
from ..errors import ConfigError, DataError, OptionError

SPECIALS = ["<pad>", "<unk>", "<bos>", "<eos>"]
PAD, UNK, BOS, EOS = 0, 1, 2, 3

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
         "fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def _below_thousand(n):
    out = []
    if n >= 100:
        out += [_ONES[n // 100], "hundred"]
        n %= 100
    if n >= 20:
        out.append(_TENS[n // 10])
        if n % 10:
            out.append(_ONES[n % 10])
    elif n:
        out.append(_ONES[n])
    return out


def number_words(n):
    """English words of ``0 <= n < 10**6``: ``307 -> ['three', 'hundred', 'seven']``."""
    if not 0 <= n < 10 ** 6:
        raise ValueError(f"number_words takes 0 .. 999999, got {n}")
    if n == 0:
        return ["zero"]
    out = []
    if n >= 1000:
        out += _below_thousand(n // 1000) + ["thousand"]
    return out + _below_thousand(n % 1000)


def number_vocabularies():
    """(source tokens, target tokens) of the number task, specials first."""
    words = sorted(set(_ONES) | set(_TENS[2:]) | {"hundred", "thousand"})
    return SPECIALS + [str(d) for d in range(10)], SPECIALS + words


def number_split(digits, n_train, n_test, seed):
    """(train numbers, test numbers): every digit count 1 .. ``digits`` equally often; test
    numbers are distinct and never in the training set (short numbers, with few distinct values,
    repeat in training)."""
    rng = np.random.RandomState(seed)
    train, test = [], []
    per_train, per_test = n_train // digits, n_test // digits
    for k in range(1, digits + 1):
        lo = 0 if k == 1 else 10 ** (k - 1)
        pool = rng.permutation(np.arange(lo, 10 ** k))
        nt = min(per_test, len(pool) // 5)
        test += list(pool[:nt])
        rest = pool[nt:]
        train += list(rest[rng.randint(0, len(rest), per_train)] if len(rest) < per_train
                      else rest[:per_train])
    return np.array(rng.permutation(train)), np.array(rng.permutation(test))


def encode(sentences, vocab, max_len, what, eos=False):
    """Token lists -> ``(ids (N, max_len) int32, lengths (N,) int32)``, <eos> appended if
    ``eos``. Raises DataError for a sequence longer than ``max_len`` or a token not in ``vocab``."""
    index = {t: i for i, t in enumerate(vocab)}
    ids = np.zeros((len(sentences), max_len), dtype=np.int32)
    lengths = np.zeros(len(sentences), dtype=np.int32)
    for n, toks in enumerate(sentences):
        toks = list(toks) + (["<eos>"] if eos else [])
        if len(toks) > max_len:
            raise DataError(f"{what} sequence {n} has {len(toks)} tokens ({' '.join(toks)}), more "
                            f"than the declared maximum {max_len}")
        for t, tok in enumerate(toks):
            if tok not in index:
                raise DataError(f"{what} sequence {n}: token {tok!r} is not in the vocabulary")
            ids[n, t] = index[tok]
        lengths[n] = len(toks)
    return ids, lengths


def write_numbers(path, digits=4, n_train=12000, n_test=1000, seed=0):
    """Write the number task in the HDF5 layout to ``path``."""
    import h5py
    src_vocab, tgt_vocab = number_vocabularies()
    max_tgt = max(len(number_words(n)) for n in range(10 ** digits)) + 1
    with h5py.File(path, "w") as f:
        for split, nums in zip(("train", "test"), number_split(digits, n_train, n_test, seed)):
            s, sl = encode([list(str(n)) for n in nums], src_vocab, digits, "source")
            t, tl = encode([number_words(n) for n in nums], tgt_vocab, max_tgt, "target", eos=True)
            for name, a in (("src", s), ("src_len", sl), ("tgt", t), ("tgt_len", tl)):
                f.create_dataset(f"{split}/{name}", data=a)
        f.attrs["src_vocab"] = json.dumps(src_vocab)
        f.attrs["tgt_vocab"] = json.dumps(tgt_vocab)


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

    def fingerprint(self):
        """What every rank must read alike (:mod:`~distnet.datasets.checks`): both vocabularies
        and, per split, every array's shape and a CRC-32 of its values (the data is in memory
        already)."""
        from .checks import crc, shape_text
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
        sequence file than rank 0 (:func:`~distnet.datasets.checks.same_data`)."""
        from .checks import same_data
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


def _text_lines(f):
    """The lines of the text file ``f`` (opened with universal newlines: ``\\n``, ``\\r\\n``,
    ``\\r``), and only at those: Unicode line separators inside a sentence (U+2028, U+0085,
    form feeds, which :meth:`str.splitlines` also splits at) would shift every later pair."""
    lines = f.read().split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def _read_lines(path):
    """The whitespace tokens of every line of the text file ``path`` (UTF-8, a byte-order mark
    dropped; DataError if unreadable)."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            return [line.split() for line in _text_lines(f)]
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise DataError(f"cannot read {path}: {e.strerror or e}") from None


def build_vocabulary(sentences, max_size=None, min_count=1, where=None):
    """Specials, then the tokens seen at least ``min_count`` times by decreasing frequency
    (ties: alphabetical), at most ``max_size`` entries in all (the rest become ``<unk>``).
    ``where``: the file of the sentences (errors name its ``file:line``)."""
    counts = {}
    for n, toks in enumerate(sentences):
        for t in toks:
            if t in SPECIALS:
                at = f"{where}:{n + 1}: " if where else ""
                raise DataError(f"{at}token {t!r} is reserved (the specials are {SPECIALS})")
            counts[t] = counts.get(t, 0) + 1
    words = sorted((t for t in counts if counts[t] >= min_count), key=lambda t: (-counts[t], t))
    if max_size is not None:
        words = words[:max(0, max_size - len(SPECIALS))]
    return SPECIALS + words


def read_vocabulary(path):
    """A vocabulary file: one token per line, id = position; the specials ``<pad> <unk> <bos>
    <eos>`` are put first when the file does not begin with them. Empty lines, tokens with
    spaces, duplicates and specials out of place are a DataError naming ``file:line``."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            lines = _text_lines(f)
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise DataError(f"cannot read vocabulary {path}: {e.strerror or e}") from None
    skip = len(SPECIALS) if lines[:len(SPECIALS)] == SPECIALS else 0
    seen = {}
    for n, line in enumerate(lines[skip:], start=skip + 1):
        tok = line.strip()
        if not tok or len(tok.split()) != 1:
            raise DataError(f"{path}:{n}: {'empty line' if not tok else repr(line) + ' is not one token'}; "
                            "a vocabulary file holds one token per line")
        if tok in SPECIALS:
            raise DataError(f"{path}:{n}: {tok!r} is a special token; put the specials {SPECIALS} "
                            "first, in that order, or leave them out")
        if tok in seen:
            raise DataError(f"{path}:{n}: {tok!r} again (first on line {seen[tok]})")
        seen[tok] = n
    if not seen:
        raise DataError(f"{path}: the vocabulary has no tokens")
    return SPECIALS + list(seen)


def _check_pair(sp, s, tp, t):
    """Two parallel files of one line per sentence: equal line counts, no empty line."""
    if len(s) != len(t):
        (lp, ln), (sp_, sn) = sorted(((sp, len(s)), (tp, len(t))), key=lambda x: -x[1])
        raise DataError(f"{lp}:{sn + 1}: no matching line in {sp_}, which has {sn} lines ({lp} has {ln}); "
                        "parallel files hold one sentence per line each")
    for path, lines in ((sp, s), (tp, t)):
        for n, toks in enumerate(lines):
            if not toks:
                raise DataError(f"{path}:{n + 1}: empty line (every line is a sentence)")


def convert_parallel_text(out, train, test=None, max_src_len=None, max_tgt_len=None, vocab_size=None,
                          min_count=1, src_vocab=None, tgt_vocab=None, test_fraction=0.0, seed=0):
    """Write the sequence HDF5 layout (module docstring) to ``out`` from parallel text files:
    ``train`` / ``test`` are ``(source file, target file)`` pairs, one sentence per line,
    whitespace tokens, line ``n`` of one the translation of line ``n`` of the other. Without
    ``test``, ``round(N * test_fraction)`` pairs drawn by ``RandomState(seed).permutation(N)``
    are held out as the test split (the rest, in that order, train; ``0``: no test split).

    Vocabularies: read from ``src_vocab`` / ``tgt_vocab`` files (:func:`read_vocabulary`; a
    token of the text missing from one is a DataError naming the text's ``file:line``), else
    built from the training sentences (:func:`build_vocabulary`: ``vocab_size`` entries at
    most, tokens seen fewer than ``min_count`` times left out); tokens outside a built
    vocabulary become ``<unk>``. A sentence longer than ``max_src_len`` (``max_tgt_len``
    counting its ``<eos>``), an empty line, or files of different line counts are a DataError
    naming ``file:line``. Written to a temporary name and moved into place. Returns
    ``{"path", "splits": {split: N}, "src_vocab", "tgt_vocab", "max_src_len", "max_tgt_len"}``."""
    from ..fileio import atomic_target, hdf5_file
    if not str(out).lower().endswith((".h5", ".hdf5")):
        raise OptionError(f"the output {out} must end in .h5 or .hdf5")
    if not 0 <= test_fraction < 1:
        raise OptionError(f"test_fraction must be in [0, 1), got {test_fraction}")
    for name, v in (("vocab_size", vocab_size), ("min_count", min_count), ("max_src_len", max_src_len),
                    ("max_tgt_len", max_tgt_len)):
        if v is not None and v < 1:
            raise OptionError(f"{name} must be >= 1, got {v}")
    if vocab_size is not None and vocab_size <= len(SPECIALS):
        raise OptionError(f"vocab_size {vocab_size} leaves no room beside the {len(SPECIALS)} specials")
    # every sentence as (file, line number, tokens)
    texts = {}
    for split, pair in (("train", train), ("test", test)):
        if pair is None:
            continue
        sp, tp = (str(p) for p in pair)
        s, t = _read_lines(sp), _read_lines(tp)
        _check_pair(sp, s, tp, t)
        texts[split] = ([(sp, n + 1, x) for n, x in enumerate(s)], [(tp, n + 1, x) for n, x in enumerate(t)])
    given = [read_vocabulary(v) if v is not None else None for v in (src_vocab, tgt_vocab)]
    for split, sides in texts.items():   # every check in file order, before any split is drawn
        for side, lines in enumerate(sides):
            limit, extra, key = (max_src_len, 0, "max_src_len") if side == 0 else (max_tgt_len, 1, "max_tgt_len")
            vocab = None if given[side] is None else set(given[side])
            for path, n, toks in lines:
                if limit is not None and len(toks) + extra > limit:
                    raise DataError(f"{path}:{n}: {len(toks) + extra} tokens{' with <eos>' if extra else ''}, "
                                    f"more than {key} = {limit}")
                if vocab is None and any(tok in SPECIALS for tok in toks):
                    _reserved(path, n, toks)
                for tok in toks if vocab is not None else ():
                    if tok not in vocab:
                        raise DataError(f"{path}:{n}: token {tok!r} is not in the vocabulary "
                                        f"{(src_vocab, tgt_vocab)[side]}")
    if test is None and test_fraction:
        s, t = texts["train"]
        perm = np.random.RandomState(seed).permutation(len(s))
        k = int(round(len(s) * test_fraction))
        if len(s) - k < 1:
            raise DataError(f"{train[0]}: test_fraction {test_fraction} leaves no training sentence of {len(s)}")
        texts = {"train": ([s[i] for i in perm[k:]], [t[i] for i in perm[k:]]),
                 "test": ([s[i] for i in perm[:k]], [t[i] for i in perm[:k]])}
    sv, tv = (given[side] if given[side] is not None else
              build_vocabulary([x for _, _, x in texts["train"][side]], vocab_size, min_count) for side in (0, 1))
    ms = max_src_len or max(len(x) for s, _ in texts.values() for _, _, x in s)
    mt = max_tgt_len or max(len(x) for _, t in texts.values() for _, _, x in t) + 1

    def known(lines, vocab):
        v = set(vocab)
        return [[w if w in v else "<unk>" for w in toks] for _, _, toks in lines]

    with atomic_target(out) as tmp:
        with hdf5_file(tmp) as f:     # a full disk: an OSError, never a crash at exit
            for split, (s, t) in texts.items():
                a, al = encode(known(s, sv), sv, ms, "source")
                b, bl = encode(known(t, tv), tv, mt, "target", eos=True)
                for name, arr in (("src", a), ("src_len", al), ("tgt", b), ("tgt_len", bl)):
                    f.create_dataset(f"{split}/{name}", data=arr)
            f.attrs["src_vocab"] = json.dumps(sv)
            f.attrs["tgt_vocab"] = json.dumps(tv)
    return {"path": str(out), "splits": {k: len(s) for k, (s, _) in texts.items()}, "src_vocab": sv,
            "tgt_vocab": tv, "max_src_len": ms, "max_tgt_len": mt}


def _reserved(path, n, toks):
    """Raise the located error for a special token written in a text file."""
    tok = next(t for t in toks if t in SPECIALS)
    raise DataError(f"{path}:{n}: token {tok!r} is reserved (the specials are {SPECIALS})")


def describe_text(info):
    """One line for ``distnet data convert`` of parallel text."""
    parts = ", ".join(f"{s} {n}" for s, n in info["splits"].items())
    return (f"wrote {info['path']}: {parts} sentence pairs, source vocabulary {len(info['src_vocab'])} tokens "
            f"(<= {info['max_src_len']} per sentence), target vocabulary {len(info['tgt_vocab'])} tokens "
            f"(<= {info['max_tgt_len']} with <eos>)")
