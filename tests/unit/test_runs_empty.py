"""`distnet runs` where there is no run: it says so (on stderr), exit 0; it printed nothing."""
from click.testing import CliRunner

from distnet.cli.main import main


def test_no_runs_is_said(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DISTNET_RUNS_DIR", raising=False)
    result = CliRunner().invoke(main, ["runs"])
    assert result.exit_code == 0
    assert result.output == "no run directories in runs (`distnet run` records each run there)\n"
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(main, ["runs", str(tmp_path / "empty")])
    assert result.exit_code == 0 and "no run directories in" in result.output
