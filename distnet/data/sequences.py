"""Sequence-to-sequence data: the HDF5 layout and the shipped number-words task, which
:class:`~distnet.datasets.sequences.SequenceDataset` reads and ``distnet data convert --target``
(:mod:`distnet.convert.text`) writes.

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

from ..errors import DataError

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
