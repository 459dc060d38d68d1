"""Seq2Seq on one process: the model's gradient (encoder, states, decoder, embeddings) against
central differences in float64; the number task; located errors for bad input."""
import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.data.sequences import encode, number_words, write_numbers
from distnet.datasets.sequences import SequenceDataset
from distnet.errors import ConfigError, DataError
from distnet.models.seq2seq import Seq2Seq
from tests.numgrad import check_grad


def test_number_words():
    assert number_words(307) == "three hundred seven".split()
    assert number_words(0) == ["zero"]
    assert number_words(1015) == "one thousand fifteen".split()
    assert number_words(90040) == "ninety thousand forty".split()


def test_split_is_held_out_and_deterministic():
    a, b = SequenceDataset(generate="numbers", digits=3, n_train=300, n_test=60, seed=5), \
        SequenceDataset(generate="numbers", digits=3, n_train=300, n_test=60, seed=5)
    da, db = a.load(), b.load()
    for x, y in zip(da["train"] + da["test"], db["train"] + db["test"]):
        np.testing.assert_array_equal(x, y)
    key = lambda s: {tuple(r) for r in s}   # noqa: E731
    assert not key(da["train"][0]) & key(da["test"][0])
    assert set(da["train"][1]) == {1, 2, 3}


def test_model_gradient_matches_central_differences():
    ds = SequenceDataset(generate="numbers", digits=2, n_train=8, n_test=2, seed=0)
    src, sl, tgt, tl = ds.load()["train"]
    m = Seq2Seq(embed=3, hidden=4, nlayers=2)
    m.configure(Numpy64(rng_seed=1), Topology.serial(), len(ds.src_vocab), len(ds.tgt_vocab))

    def loss_and_grads():
        grads = {}
        states, cache = m._encode(src, sl)
        loss, dstates = m._decode_train(states, tgt, tl, 8, grads)
        m._encode_backward(dstates, cache, grads)
        return loss / 8, grads

    _, grads = loss_and_grads()
    for k in ("enc.Wx0", "enc.Wh1", "enc.b0", "enc.embed", "dec.Wx1", "dec.Wh0", "dec.embed", "dec.Wo", "dec.bo"):
        check_grad(lambda: loss_and_grads()[0], m.params[k], grads[k], eps=1e-5, rtol=1e-5, atol=1e-8)


def test_sequences_longer_than_declared_are_refused():
    with pytest.raises(ConfigError, match="sequence [0-9]+ has 5 tokens with its <eos>, more than max_tgt_len = 4"):
        SequenceDataset(generate="numbers", digits=3, n_train=30, n_test=6, max_tgt_len=4).load()


def test_unknown_token_and_bad_file(tmp_path):
    with pytest.raises(DataError, match="token 'x' is not in the vocabulary"):
        encode([["1", "x"]], ["<pad>", "<unk>", "<bos>", "<eos>", "1"], 3, "source")
    p = tmp_path / "n.h5"
    write_numbers(str(p), digits=2, n_train=20, n_test=4)
    import h5py
    with h5py.File(p, "a") as f:
        f["test/tgt"][0, 0] = 99
    with pytest.raises(DataError, match="test/tgt has token id 99 outside its vocabulary"):
        SequenceDataset(path=str(p)).load()


def test_stage_keys_are_checked():
    with pytest.raises(ConfigError, match="encoder_stage must be 0 or 1"):
        Seq2Seq(encoder_stage=2)
    with pytest.raises(ConfigError, match="decoder must be on the other stage"):
        Seq2Seq(encoder_stage=1, decoder_stage=1).check_stages(2)


def test_convert_parallel_text(tmp_path):
    from distnet.convert.text import convert_parallel_text
    (tmp_path / "s.txt").write_text("a b\nb c c\nb\n")
    (tmp_path / "t.txt").write_text("x\ny y z\nz q\n")
    (tmp_path / "ts.txt").write_text("b d\n")
    (tmp_path / "tt.txt").write_text("y\n")
    out = str(tmp_path / "p.h5")
    info = convert_parallel_text(out, (tmp_path / "s.txt", tmp_path / "t.txt"),
                                 (tmp_path / "ts.txt", tmp_path / "tt.txt"), vocab_size=7)
    sv, tv = info["src_vocab"], info["tgt_vocab"]
    assert sv == ["<pad>", "<unk>", "<bos>", "<eos>", "b", "c", "a"] and tv[4:] == ["y", "z", "q"]
    d = SequenceDataset(path=out).load()
    np.testing.assert_array_equal(d["test"][0], [[4, 1, 0]])    # 'd' is unknown: <unk>
    np.testing.assert_array_equal(d["train"][3], [2, 4, 3])     # target lengths with <eos>
    with pytest.raises(DataError, match=r"t.txt:2: 4 tokens with <eos>, more than max_tgt_len = 3"):
        convert_parallel_text(out, (tmp_path / "s.txt", tmp_path / "t.txt"), max_tgt_len=3)
    (tmp_path / "short.txt").write_text("x\n")
    with pytest.raises(DataError, match="s.txt:2: no matching line in .*short.txt, which has 1 lines"):
        convert_parallel_text(out, (tmp_path / "s.txt", tmp_path / "short.txt"))
    info = convert_parallel_text(out, (tmp_path / "s.txt", tmp_path / "t.txt"), min_count=2)
    assert info["src_vocab"][4:] == ["b", "c"] and info["tgt_vocab"][4:] == ["y", "z"]


def test_cli_converts_parallel_text_with_located_errors(tmp_path):
    """`distnet data convert SRC OUT --target TGT`: the held-out split, a vocabulary file, and
    file:line errors for an unknown token, an empty line, a bad vocabulary file, a sentence
    over --max-src-len, files of different line counts; text options without --target."""
    from click.testing import CliRunner

    from distnet.cli.main import main
    (tmp_path / "s.txt").write_text("1 2\n2 3 3\n2\n3 1\n")
    (tmp_path / "t.txt").write_text("one two\ntwo three three\ntwo\nthree one\n")
    (tmp_path / "sv.txt").write_text("1\n2\n3\n")

    def convert(*args):
        # --force: every call writes o.h5 (the errors below come before anything is written)
        r = CliRunner().invoke(main, ["data", "convert", str(tmp_path / "s.txt"), str(tmp_path / "o.h5"),
                                      "--force", *args])
        return r.exit_code, r.output

    code, out = convert("--target", str(tmp_path / "t.txt"), "--test-fraction", "0.25",
                        "--src-vocab", str(tmp_path / "sv.txt"))
    assert code == 0 and "train 3, test 1 sentence pairs, source vocabulary 7 tokens" in out
    d = SequenceDataset(path=str(tmp_path / "o.h5"), max_src_len=3, max_tgt_len=4)
    loaded = d.load()
    assert d.src_vocab[4:] == ["1", "2", "3"] and len(loaded["train"][0]) + len(loaded["test"][0]) == 4
    (tmp_path / "sv2.txt").write_text("1\n2\n")
    code, out = convert("--target", str(tmp_path / "t.txt"), "--src-vocab", str(tmp_path / "sv2.txt"))
    assert code != 0 and "s.txt:2: token '3' is not in the vocabulary" in out
    (tmp_path / "sv3.txt").write_text("1\n\n2\n")
    code, out = convert("--target", str(tmp_path / "t.txt"), "--src-vocab", str(tmp_path / "sv3.txt"))
    assert code != 0 and "sv3.txt:2: empty line" in out
    (tmp_path / "sv4.txt").write_text("1\n2\n1\n")
    code, out = convert("--target", str(tmp_path / "t.txt"), "--src-vocab", str(tmp_path / "sv4.txt"))
    assert code != 0 and "sv4.txt:3: '1' again (first on line 1)" in out
    (tmp_path / "e.txt").write_text("one\n\ntwo\nthree\n")
    code, out = convert("--target", str(tmp_path / "e.txt"))
    assert code != 0 and "e.txt:2: empty line" in out
    code, out = convert("--target", str(tmp_path / "t.txt"), "--max-src-len", "2")
    assert code != 0 and "s.txt:2: 3 tokens, more than max_src_len = 2" in out
    (tmp_path / "long.txt").write_text("a\nb\nc\nd\ne\n")
    code, out = convert("--target", str(tmp_path / "long.txt"))
    assert code != 0 and "long.txt:5: no matching line in" in out
    code, out = convert("--vocab-size", "9")
    assert code != 0 and "--vocab-size is an option of parallel text" in out


def test_cli_check_locates_the_errors(tmp_path):
    """`distnet check` of the shipped experiment: OK; a decoder on its encoder's stage and a
    declared maximum shorter than the data are one-line errors (exit 2 / 1)."""
    from click.testing import CliRunner
    from distnet.cli.main import main
    from pathlib import Path
    exp = str(Path(__file__).resolve().parents[2] / "experiments" / "seq2seq_numbers.yaml")
    ok = CliRunner().invoke(main, ["check", exp])
    assert ok.exit_code == 0 and "encoder: embedding 32, LSTM 1 x 64" in ok.output
    bad = tmp_path / "bad.yaml"
    text = open(exp).read().replace("decoder_stage: 1", "decoder_stage: 0")
    bad.write_text(text.replace("eval_every: 1,", "eval_every: 1, pipe: 2,"))
    r = CliRunner().invoke(main, ["check", str(bad)])
    line = text.splitlines().index(next(ln for ln in text.splitlines() if "decoder_stage" in ln)) + 1
    assert r.exit_code != 0 and f"{bad}:{line}: key 'decoder_stage'" in r.output
    r = CliRunner().invoke(main, ["check", exp, "--set", "dataset.max_src_len=3"])
    assert r.exit_code != 0 and "more than max_src_len = 3" in r.output
    short = tmp_path / "short.yaml"       # the key's line and the first sequence too long
    short.write_text(text.replace("max_src_len: 4", "max_src_len: 3"))
    line = text.splitlines().index(next(ln for ln in text.splitlines() if "max_src_len" in ln)) + 1
    src = SequenceDataset(generate="numbers", digits=4, n_train=12000, n_test=1000, seed=0).load()["train"]
    first = int(np.argmax(src[1] > 3))
    r = CliRunner().invoke(main, ["run", str(short), "--no-run-dir"])
    assert r.exit_code == 2 and f"{short}:{line}: key 'max_src_len': generated numbers: train/src sequence " \
        f"{first} has 4 tokens, more than max_src_len = 3" in r.output


def test_checkpoint_resume_and_evaluate_on_one_process(tmp_path):
    """`distnet run` 3 epochs == 1 epoch, a checkpoint, `--resume` to 3 (float64, bitwise: costs
    and every weight), and `distnet evaluate` of the checkpoint prints the run's final test
    accuracies; the checkpoint holds Adam's moments and the step count."""
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from distnet.cli.main import main
    from distnet.models.checkpoint import read_checkpoint
    exp = str(Path(__file__).resolve().parents[2] / "experiments" / "seq2seq_numbers.yaml")
    small = ["--set", "dataset.digits=2", "--set", "dataset.n_train=200", "--set", "dataset.n_test=40",
             "--set", "backend.dtype=float64", "--set", "model.hidden=8", "--set", "model.embed=4"]

    def run(epochs, name, *extra):
        r = CliRunner().invoke(main, ["run", exp, "-q", "--no-progress", "--run-dir", str(tmp_path / name),
                                      "--set", f"model.num_epochs={epochs}", *small, *extra])
        assert r.exit_code == 0, r.output
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        return [json.loads(x) for x in lines]

    full = run(3, "full")
    run(1, "part")
    resumed = run(3, "resumed", "--resume", str(tmp_path / "part" / "checkpoint.h5"))
    costs = [[r["cost"] for r in m if "cost" in r and "final" not in r] for m in (full, resumed)]
    assert len(costs[0]) == 3 and costs[0] == costs[1]
    a, b = (read_checkpoint(tmp_path / n / "checkpoint.h5") for n in ("full", "resumed"))
    assert a.meta["steps"] == b.meta["steps"] == 3 * 4 and a.epoch == b.epoch == 2
    for ea, eb in zip(a.params, b.params):
        assert ea["name"] == eb["name"] and sorted(ea["state"]) == ["m", "v"]
        np.testing.assert_array_equal(ea["value"], eb["value"])
        np.testing.assert_array_equal(ea["state"]["v"], eb["state"]["v"])
    r = CliRunner().invoke(main, ["evaluate", exp, "--checkpoint", str(tmp_path / "full" / "checkpoint.h5"),
                                  *small])
    assert r.exit_code == 0, r.output
    final = full[-2]   # the last epoch's record (the last line is the final summary)
    assert f"test set: token accuracy {final['test_token_acc']:.2f}%, sequence accuracy " \
           f"{final['test_seq_acc']:.2f}%" in r.output


def test_thread_plan_is_one_blas_thread_unless_the_user_chose():
    """Seq2Seq's matrices are small: one BLAS thread per rank by default; the backend key
    ``threads`` and OPENBLAS_NUM_THREADS still win (the thread plan's order)."""
    from distnet.backend import Numpy
    from distnet.experiments.seq2seq import Seq2SeqExperiment

    def plan(env, **backend):
        exp = Seq2SeqExperiment(Seq2Seq(), [SequenceDataset(generate="numbers", digits=1, n_train=10, n_test=2)],
                                backend=Numpy(**backend))
        return exp.plan_threads(None, env)
    p = plan({})
    assert (p.blas, p.kernel) == (1, 1) and p.describe().startswith("threads 1/rank (1 for seq2seq's small matrices; ")
    assert plan({"OPENBLAS_NUM_THREADS": "2"}).blas == 2
    assert plan({}, threads=3).blas == 3
    assert plan({"DISTNET_KERNEL_THREADS": "2"}).kernel == 2


def test_cli_show_gives_the_layout_and_the_parameters_of_each_stage():
    from pathlib import Path

    from click.testing import CliRunner

    from distnet.cli.main import main
    exp = str(Path(__file__).resolve().parents[2] / "experiments" / "seq2seq_numbers_pipe2.yaml")
    r = CliRunner().invoke(main, ["show", exp, "-n", "4", "--set", "data=2"])
    assert r.exit_code == 0, r.output
    ds = SequenceDataset(generate="numbers", digits=4, n_train=12000, n_test=1000, seed=0, max_src_len=4,
                         max_tgt_len=7)
    ds.load()
    m = Seq2Seq(embed=32, hidden=64)
    m.configure(Numpy64(), Topology.serial(), len(ds.src_vocab), len(ds.tgt_vocab))
    enc, dec = (sum(p.value.size for p in half.params()) for half in m.layers)
    assert r.output.splitlines()[0] == "4 rank(s): data 2 x pipe 2"
    assert f"stage 0: encoder, {enc} parameters; stage 1: decoder, {dec} parameters" in r.output


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", ["devicelike", "cupy"])
def test_device_backends_train_seq2seq_as_numpy(name, dtype, tmp_path):
    """Seq2Seq on a device backend (the device-like stand-in for cupy here, cupy where a GPU is
    present): the same per-epoch costs, accuracies and weights as numpy (distnet.testing.backends'
    agreement for the dtype; the same accuracies), with dropout, clipping and a short last batch;
    its checkpoint holds Adam's moments."""
    from distnet.experiments.seq2seq import Seq2SeqExperiment
    from distnet.models.checkpoint import read_checkpoint
    from distnet.optim.rules import Adam
    from distnet.testing.backends import assert_agree, make_backend

    def run(backend, path=None):
        model = Seq2Seq(num_epochs=3, embed=5, hidden=6, nlayers=2, batch_size=16, dropout=0.2,
                        learning_rule=Adam(learning_rate=0.05, max_grad_norm=1.0))
        ds = SequenceDataset(generate="numbers", digits=2, n_train=70, n_test=20, seed=1)
        exp = Seq2SeqExperiment(model, [ds], backend=make_backend(backend, dtype=dtype, rng_seed=4),
                                eval_every=1, logging={"level": 30})
        exp.checkpoint_path = path
        result = exp.run(topology=Topology.serial())
        return result, model.gather_params()

    make_backend(name)           # skips where the backend cannot run (cupy without a GPU)
    ref, ref_params = run("numpy")
    got, params = run(name, str(tmp_path / "ck.h5"))
    assert_agree(got.epoch_costs, ref.epoch_costs, dtype, name)
    assert got.accuracy == ref.accuracy
    for k in ref_params:
        assert_agree(params[k], ref_params[k], dtype, f"{name} {k}")
    ck = read_checkpoint(tmp_path / "ck.h5")
    assert ck.meta["steps"] == 15 and all(sorted(e["state"]) == ["m", "v"] for e in ck.params)


@pytest.mark.parametrize("override, words", [
    ("dataset.n_train=0", "key 'n_train': expected int >= 1, got 0"),
    ("dataset.n_train=-5", "key 'n_train': expected int >= 1, got -5"),      # was: rest[:-2], ~all numbers
    ("dataset.n_test=-1", "key 'n_test': expected int >= 1, got -1"),
    ("dataset.n_train=3", "key 'n_train': n_train must be at least digits (4)"),   # was: a traceback
    ("dataset.n_test=2", "key 'n_test': n_test must be at least digits (4)"),
    ("dataset.n_train=20000000", "key 'n_train': n_train must be at most 10000000"),    # was: minutes, then a hang
    ("dataset.seed=-1", "key 'seed': expected int in [0, 4294967295], got -1"),          # was: a traceback
    ("dataset.max_src_len=0", "key 'max_src_len': expected int >= 1, got 0"),
])
def test_generated_task_sizes_are_checked(override, words):
    from click.testing import CliRunner
    from distnet.cli.main import main
    from pathlib import Path
    exp = str(Path(__file__).resolve().parents[2] / "experiments" / "seq2seq_numbers.yaml")
    r = CliRunner().invoke(main, ["check", exp, "--set", override])
    assert r.exit_code == 2 and f"command line --set {override}: {words}" in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_a_key_given_twice_is_refused_by_run_and_check(tmp_path):
    """A key given twice in a seq2seq experiment file: `distnet check` and `distnet run` refuse
    it (exit 2) naming the file, line and key, as they do for a chain of layers."""
    from pathlib import Path

    from click.testing import CliRunner

    from distnet.cli.main import main
    text = (Path(__file__).resolve().parents[2] / "experiments" / "seq2seq_numbers.yaml").read_text()
    exp = tmp_path / "twice.yaml"
    exp.write_text(text.replace("seed: 0,", "seed: 0, seed: 0,", 1))
    line = 1 + text[:text.index("seed: 0,")].count("\n")
    for args in (["check", str(exp)], ["run", str(exp), "--no-progress", "--no-run-dir", "--no-checkpoint"]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2, r.output
        assert f"twice.yaml:{line}: key 'seed': given twice" in r.output, (args[0], r.output)


def test_parallel_text_from_windows_and_the_web(tmp_path):
    """A byte-order mark (Notepad's UTF-8) became part of the first token ('\\ufeffhello', not
    'hello'); a Unicode line separator inside a sentence (U+2028, scraped text) split it in two,
    shifting every later pair against its translation."""
    from distnet.convert.text import convert_parallel_text, read_vocabulary
    (tmp_path / "s.txt").write_bytes("\ufeffhello world\r\nhow\u2028are you\r\nhello\r\n".encode("utf-8"))
    (tmp_path / "t.txt").write_bytes("bonjour monde\r\ncomment vas tu\r\nbonjour\r\n".encode("utf-8"))
    info = convert_parallel_text(tmp_path / "p.h5", (tmp_path / "s.txt", tmp_path / "t.txt"), None,
                                 test_fraction=0.34, seed=0)
    assert sum(info["splits"].values()) == 3
    assert "hello" in info["src_vocab"] and not any("\ufeff" in t for t in info["src_vocab"])
    assert {"how", "are", "you"} <= set(info["src_vocab"])
    (tmp_path / "v.txt").write_bytes("\ufeffhello\nworld\n".encode("utf-8"))
    assert read_vocabulary(tmp_path / "v.txt")[-2:] == ["hello", "world"]
