"""One meaning of the exit status across every command: 2 for the user's configuration or command
line, 1 for what running met (data, files). ``distnet check``, ``distribute`` and ``data`` exited
2 for any error (a missing data file, an output that exists, an image folder with an empty class),
``distnet plot`` and ``compare --plot`` 1 for any."""
import numpy as np
import pytest
from click.testing import CliRunner

from distnet.cli.main import main
from tests.tiny import CNN, experiment, write_data


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("codes")
    data = write_data(d / "data.h5")
    (d / "cnn.yaml").write_text(experiment(CNN, data))
    (d / "nodata.yaml").write_text(experiment(CNN, d / "missing.h5"))
    (d / "typo.yaml").write_text(experiment(CNN, data).replace("nofm: 3", "nofm: three"))
    (d / "latin1.yaml").write_bytes(b"a: \xff\n")
    np.save(d / "x.npy", np.zeros((4, 1, 3, 3), np.uint8))
    (d / "imgs" / "cat").mkdir(parents=True)      # a class folder without images
    (d / "out.h5").write_text("kept")
    return d


CASES = {
    # the user's configuration or command line: 2
    "check: a wrong type": (["check", "typo.yaml"], 2, "key 'nofm'"),
    "distribute: not UTF-8": (["distribute", "latin1.yaml"], 2, "not UTF-8"),
    "convert: an output that is not HDF5": (["data", "convert", "x.npy", "o.txt"], 2, "must end in .h5"),
    "convert: a source of no known kind": (["data", "convert", "data.h5", "o.h5"], 2, "give a folder"),
    "convert: a text option without --target": (["data", "convert", "x.npy", "o.h5", "--min-count", "2"], 2,
                                                "--min-count is an option of parallel text"),
    "convert: a bad --size": (["data", "convert", "imgs", "o.h5", "--size", "0x3"], 2, "size must be HxW"),
    "convert: images without --labels": (["data", "convert", "x.npy", "o.h5"], 2, "images only"),
    # what running met: 1
    "check: a missing data file": (["check", "nodata.yaml"], 1, "missing.h5 does not exist"),
    "distribute: an output that exists": (["distribute", "cnn.yaml", "-o", "out.h5"], 1, "already exists"),
    "convert: an output that exists": (["data", "convert", "x.npy", "out.h5"], 1, "already exists"),
    "convert: a folder of no images": (["data", "convert", "imgs", "o.h5"], 1, "class folder"),
    "plot: not a metrics file": (["plot", "data.h5", "-o", "p.png"], 1, "not a metrics file"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_exit_status_says_whose_the_error_is(files, case, monkeypatch):
    args, code, words = CASES[case]
    monkeypatch.chdir(files)
    r = CliRunner().invoke(main, args)
    assert r.exit_code == code and "distnet: error:" in r.output and words in r.output, r.output
    assert (files / "out.h5").read_text() == "kept"


@pytest.mark.parametrize("args", [["run", "cnn.yaml", "--resume", ""], ["run", "cnn.yaml", "--checkpoint", ""],
                                  ["run", "cnn.yaml", "--metrics", ""], ["run", "cnn.yaml", "--run-dir", ""],
                                  ["distribute", "cnn.yaml", "-o", ""]])
def test_an_empty_path_is_a_usage_error(files, monkeypatch, args):
    """--resume "$CK" with CK unset trained from scratch; --checkpoint "" wrote no checkpoint,
    --metrics "" no metrics, --run-dir "" the default one, distribute -o "" to stdout: all exit 0."""
    monkeypatch.chdir(files)
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and "an empty path (an unset shell variable?)" in r.output, r.output
    assert not (files / "runs").exists()
