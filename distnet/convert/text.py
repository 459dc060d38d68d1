"""``distnet data convert --target``: parallel text files (one sentence per line) to the sequence
layout of :mod:`distnet.data.sequences`, with vocabularies built from the training sentences or
read from files."""
import json

import numpy as np

from ..data.sequences import SPECIALS, encode
from ..errors import DataError, OptionError


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
    """Write the sequence HDF5 layout (:mod:`distnet.data.sequences`) to ``out`` from parallel text files:
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
    texts = _read_texts(train, test)
    given = [read_vocabulary(v) if v is not None else None for v in (src_vocab, tgt_vocab)]
    for sides in texts.values():    # every check in file order, before any split is drawn
        for side, lines in enumerate(sides):
            _check_lines(lines, side, (max_src_len, max_tgt_len)[side], given[side], (src_vocab, tgt_vocab)[side])
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


def _read_texts(train, test):
    """``{split: (source lines, target lines)}`` of the given ``(source file, target file)``
    pairs, every sentence as ``(file, line number, tokens)``."""
    texts = {}
    for split, pair in (("train", train), ("test", test)):
        if pair is None:
            continue
        sp, tp = (str(p) for p in pair)
        s, t = _read_lines(sp), _read_lines(tp)
        _check_pair(sp, s, tp, t)
        texts[split] = ([(sp, n + 1, x) for n, x in enumerate(s)], [(tp, n + 1, x) for n, x in enumerate(t)])
    return texts


def _check_lines(lines, side, limit, vocab, vocab_file):
    """DataError naming ``file:line`` for a sentence of one side (0 source, 1 target: counted
    with its ``<eos>``) longer than ``limit``, a special token written in it (no ``vocab``
    given), or a token not in ``vocab`` (read from ``vocab_file``)."""
    extra, key = (0, "max_src_len") if side == 0 else (1, "max_tgt_len")
    vocab = None if vocab is None else set(vocab)
    for path, n, toks in lines:
        if limit is not None and len(toks) + extra > limit:
            raise DataError(f"{path}:{n}: {len(toks) + extra} tokens{' with <eos>' if extra else ''}, "
                            f"more than {key} = {limit}")
        if vocab is None and any(tok in SPECIALS for tok in toks):
            _reserved(path, n, toks)
        for tok in toks if vocab is not None else ():
            if tok not in vocab:
                raise DataError(f"{path}:{n}: token {tok!r} is not in the vocabulary {vocab_file}")


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
