"""Seq2Seq under mpiexec through the command line: bad input ends every rank with the located
error (exit 2, no hang); a checkpoint written by the encoder/decoder split on 2 ranks is evaluated
on one process with the accuracies the run reported."""
import json
from pathlib import Path

from tests.test_cli import distnet

EXP = Path(__file__).resolve().parents[1] / "experiments" / "seq2seq_numbers_pipe2.yaml"
SMALL = ["--set", "dataset.digits=2", "--set", "dataset.n_train=200", "--set", "dataset.n_test=40",
         "--set", "model.hidden=8", "--set", "model.embed=4", "--set", "model.num_epochs=2"]


def _line_of(text, key):
    return next(i for i, ln in enumerate(text.splitlines(), 1) if key in ln)


def test_bad_input_ends_every_rank_with_the_located_error(tmp_path):
    text = EXP.read_text()
    for name, old, new, key, message in (
            ("short", "max_src_len: 4", "max_src_len: 3", "max_src_len",
             "generated numbers: train/src sequence"),
            ("same", "decoder_stage: 1", "decoder_stage: 0", "decoder_stage",
             "the decoder must be on the other stage than its encoder")):
        bad = tmp_path / f"{name}.yaml"
        bad.write_text(text.replace(old, new))
        out = distnet("run", str(bad), "--no-run-dir", n=2)
        where = f"{bad}:{_line_of(text, key)}: key '{key}': "
        assert out.returncode == 2, out.stderr
        for rank in (0, 1):
            assert f"[rank {rank}] distnet: error: {where}" in out.stderr and message in out.stderr


def test_pipe2_checkpoint_evaluates_on_one_process(tmp_path):
    run = tmp_path / "run"
    distnet("run", str(EXP), "--run-dir", str(run), "-q", *SMALL, n=2, check=True)
    final = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()][-2]
    out = distnet("evaluate", str(EXP.with_name("seq2seq_numbers.yaml")), "--checkpoint",
                  str(run / "checkpoint.h5"), *SMALL, check=True)
    assert out.stdout.splitlines()[0].endswith("epoch 1 (written on 2 rank(s)), evaluated on 1 rank(s)")
    test = next(x for x in out.stdout.splitlines() if x.startswith("test set"))
    assert test.startswith(f"test set: token accuracy {final['test_token_acc']:.2f}%, sequence accuracy "
                           f"{final['test_seq_acc']:.2f}%")
