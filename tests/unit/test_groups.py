"""data convert --group-by (distnet.convert.groups): every image of one group in one split, the
split sizes as close as whole groups allow, the plain draw's permutation, class by class with
--stratify; the converter's line and refusals."""
import re

import numpy as np
import pytest

from distnet.convert.groups import draw_groups, group_keys, group_line, parse_group_by
from distnet.errors import DataError, OptionError


def _keys(n_groups, sizes=(3, 5, 2, 4)):
    return [f"photo{g}" for g in range(n_groups) for _ in range(sizes[g % len(sizes)])]


def test_every_group_is_in_one_split_and_the_sizes_follow_the_fractions():
    keys = _keys(20)
    pos = draw_groups(keys, 0.2, 0.1, seed=0, what="src")
    every = np.concatenate(list(pos.values()))
    assert sorted(every.tolist()) == list(range(len(keys)))          # a partition of the images
    owner = {}
    for split, p in pos.items():
        for i in p:
            assert owner.setdefault(keys[i], split) == split          # never two splits for a group
    n = len(keys)
    assert round(n * 0.2) <= len(pos["test"]) < round(n * 0.2) + 5    # overshoot below one group
    assert round(n * 0.1) <= len(pos["valid"]) < round(n * 0.1) + 5
    perm = np.random.RandomState(0).permutation(n)                   # the plain draw's order kept
    for p in pos.values():
        assert list(p) == [i for i in perm if i in set(p.tolist())]
    assert draw_groups(keys, 0.2, 0.1, seed=0, what="src")["test"].tolist() == pos["test"].tolist()


def test_stratified_groups_put_every_class_in_every_split():
    keys = [f"c{c}-g{g}" for c in range(3) for g in range(4) for _ in range(5)]
    labels = [int(k[1]) for k in keys]
    pos = draw_groups(keys, 0.25, 0.25, seed=3, what="src", labels=labels)
    for split in ("train", "valid", "test"):
        assert sorted({labels[i] for i in pos[split]}) == [0, 1, 2]


def test_keys_refusals_and_the_line():
    pattern = parse_group_by(r"^(.*)_\d+")
    assert group_keys(["a_1.png", "sub/b_22.jpg"], pattern) == ["a", "sub/b"]
    assert group_keys(["a_1.png"], re.compile(r"^[a-z]")) == ["a"]          # no group: the whole match
    with pytest.raises(DataError, match=r"--group-by '\^\(\.\*\)_\\d\+' finds no group in 1 image path\(s\) .*: x.png"):
        group_keys(["a_1.png", "x.png"], pattern)
    with pytest.raises(OptionError, match="--group-by '\\(' is not a regular expression"):
        parse_group_by("(")
    with pytest.raises(DataError, match="the 2 group\\(s\\) of --group-by cannot give the train split an image"):
        draw_groups(["a", "a", "b"], 0.3, 0.3, seed=0, what="src")
    keys = ["a", "a", "b", "c"]
    pos = {"test": np.array([0, 1]), "train": np.array([2, 3])}
    assert group_line(pattern, keys, pos) == ("splits drawn by group (--group-by '^(.*)_\\d+': 3 groups, every group "
                                              "in one split): test 1 group(s), 2 image(s); train 2 group(s), "
                                              "2 image(s)")
