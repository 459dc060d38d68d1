"""docs/neon.md's table of neon v0.4.0's example files matches ``tests/data/neon_04``: one row
per file of the folder (all 22), each file's status agreeing with what the tests expect of it
(GPU rows: the Cudanet / Cudamat files; every other file runs on the CPU)."""
import re

from tests import neon_files

DOC = neon_files.ROOT / "docs" / "neon.md"


def _rows():
    text = DOC.read_text()
    section = text.split("## neon v0.4.0's 22 example files", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `([^`]+)` \| (.+) \| (.+) \| (.+) \| (.+) \|$", line)
        if m:
            assert m.group(1) not in rows, f"{m.group(1)} listed twice"
            rows[m.group(1)] = m.groups()[1:]
    return rows


def test_every_file_of_the_folder_has_one_row():
    files = {p.stem for p in neon_files.NEON04 if p.parent.name == "neon_04"}
    assert len(files) == 22
    assert set(_rows()) == files


def test_status_agrees_with_the_tests():
    for stem, (model, dataset, backend, status) in _rows().items():
        path = neon_files.ROOT / "tests" / "data" / "neon_04" / f"{stem}.yaml"
        text = path.read_text()
        assert f"neon.datasets.{dataset.lower()}." in text, stem
        if neon_files.uses_gpu(path):
            assert status.startswith("needs GPU"), stem
        else:
            assert status.startswith("runs on CPU"), stem
