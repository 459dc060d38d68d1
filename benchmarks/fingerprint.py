"""Float64 fingerprints of whole trainings, to show that a change of structure changes no number.

``python benchmarks/fingerprint.py TREE OUT.json [--cases a,b] [--work DIR]`` runs every case (a
shipped experiment in float64, a few epochs, on 1 to 6 ranks; resumes included) with TREE's
distnet (``PYTHONPATH=TREE``, this virtualenv's packages) and writes, per case, the per-epoch
costs, the final error rates and a SHA-256 of every array of the final checkpoint.
``python benchmarks/fingerprint.py --compare BEFORE.json AFTER.json`` prints every difference
(exit 1 when there is one). Run the first form on the tree before the change and on the tree
after it; the runs take about ten minutes on 2 cores.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.dirname(sys.executable)
F64 = ["--set", "backend.dtype=float64"]

#: name -> (experiment, ranks, extra run arguments, resume: (first epochs, total epochs) or None)
CASES = {
    "cnn_1": ("experiments/mnist_cnn.yaml", 1, ["--set", "model.num_epochs=2"], None),
    "cnn_dist_4": ("experiments/mnist_cnn_dist.yaml", 4, ["--set", "model.num_epochs=2"], None),
    "cnn_dist_6": ("experiments/mnist_cnn_dist.yaml", 6, ["--set", "model.num_epochs=1"], None),
    "cnn_resume_1": ("experiments/mnist_cnn.yaml", 1, [], (1, 2)),
    "cnn_dist_resume_4": ("experiments/mnist_cnn_dist.yaml", 4, [], (1, 2)),
    "cnn_sharded_4": ("experiments/mnist_cnn_dist.yaml", 4,
                      ["--set", "model.num_epochs=1", "--sharded-checkpoint"], None),
    "bn_adam_1": ("experiments/mnist_cnn_bn_adam.yaml", 1, ["--set", "model.num_epochs=2"], None),
    "bn_adam_dist_4": ("experiments/mnist_cnn_bn_adam_dist.yaml", 4, ["--set", "model.num_epochs=2"], None),
    "gb_1": ("experiments/mnist_gb.yaml", 1, ["--set", "model.num_epochs=1"], None),
    "gb_dist_4": ("experiments/mnist_gb_dist.yaml", 4, ["--set", "model.num_epochs=1"], None),
    "mlp_vecpar_2": ("experiments/mnist_mlp_vecpar.yaml", 2, ["--set", "model.num_epochs=2"], None),
    "mlp_datapar_2": ("experiments/mnist_mlp_datapar.yaml", 2, ["--set", "model.num_epochs=2"], None),
    "mlp_pipeline_2": ("experiments/mnist_mlp_pipeline.yaml", 2, ["--set", "model.num_epochs=2"], None),
    "hybrid_4": ("experiments/mnist_cnn_hybrid.yaml", 4, ["--set", "model.num_epochs=1"], None),
    "hybrid_data_8": ("experiments/mnist_cnn_hybrid.yaml", 8,
                      ["--set", "model.num_epochs=1", "--set", "data=2"], None),
    "resnet_dist_4": ("experiments/mnist_resnet_dist.yaml", 4, ["--set", "model.num_epochs=1"], None),
    "towers_dist_2": ("experiments/mnist_towers_dist.yaml", 2, ["--set", "model.num_epochs=2"], None),
    "seq2seq_1": ("experiments/seq2seq_numbers.yaml", 1, ["--set", "model.num_epochs=1"], None),
    "seq2seq_pipe_2": ("experiments/seq2seq_numbers_pipe2.yaml", 2, [], (1, 2)),
    "dbn_1": ("experiments/mnist_dbn.yaml", 1, ["--set", "model.num_epochs=2"], None),
    "dbn_datapar_2": ("experiments/mnist_dbn_datapar.yaml", 2, ["--set", "model.num_epochs=2"], None),
}

#: Keys of a metrics line that measure time or name files, not numbers of the training.
VOLATILE = {"seconds", "checkpoint", "checkpoints", "best_checkpoint", "images_per_s", "created",
            "run_dir", "path"}


def _clean(v):
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in sorted(v.items()) if k not in VOLATILE and "time" not in k
                and not k.endswith("seconds")}
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return v


def _checkpoint_hashes(path):
    import h5py
    import numpy as np
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and obj.dtype.kind in "fiub":
            out[name] = hashlib.sha256(np.ascontiguousarray(obj[()]).tobytes()).hexdigest()[:16]

    if os.path.isdir(path):     # a sharded folder: the consolidated global arrays
        merged = path + ".consolidated.h5"
        subprocess.run([os.path.join(VENV_BIN, "distnet"), "checkpoint", "consolidate", path, merged],
                       check=True, capture_output=True, env=_env)
        path = merged
    with h5py.File(path, "r") as f:
        f.visititems(visit)
        for k in ("epoch", "steps"):
            if k in f.attrs:
                out["attr:" + k] = int(f.attrs[k])
    return out


def _run(tree, exp, n, args, run_dir):
    cmd = [os.path.join(VENV_BIN, "python"), "-m", "distnet", "run", os.path.join(ROOT, exp),
           "--run-dir", run_dir, "--force", "-q", "--no-progress"] + F64 + args
    if n > 1:
        cmd = [os.path.join(VENV_BIN, "mpiexec"), "-n", str(n)] + cmd
    p = subprocess.run(cmd, cwd=ROOT, env=_env, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")


def fingerprint(tree, name, work):
    exp, n, args, resume = CASES[name]
    run_dir = os.path.join(work, name)
    shutil.rmtree(run_dir, ignore_errors=True)
    if resume is None:
        _run(tree, exp, n, args, run_dir)
    else:
        first, total = resume
        _run(tree, exp, n, args + ["--set", f"model.num_epochs={first}"], run_dir + "-a")
        _run(tree, exp, n, args + ["--set", f"model.num_epochs={total}", "--resume",
                                   os.path.join(run_dir + "-a", "checkpoint.h5")], run_dir)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        metrics = [_clean(json.loads(line)) for line in f if line.strip()]
    ckpt = os.path.join(run_dir, "checkpoint.h5")
    return {"metrics": metrics, "checkpoint": _checkpoint_hashes(ckpt) if os.path.exists(ckpt) else None}


def compare(a_path, b_path):
    with open(a_path) as f:
        a = json.load(f)
    with open(b_path) as f:
        b = json.load(f)
    bad = 0
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            print(f"{name}: only in {'the first' if name in a else 'the second'}")
            bad += 1
            continue
        if a[name] == b[name]:
            print(f"{name}: identical ({len(a[name]['metrics'])} metric lines, "
                  f"{len(a[name]['checkpoint'] or {})} checkpoint arrays)")
            continue
        bad += 1
        print(f"{name}: DIFFERS")
        for key in ("metrics", "checkpoint"):
            if a[name][key] != b[name][key]:
                print(f"  {key}:\n    {json.dumps(a[name][key])[:600]}\n    {json.dumps(b[name][key])[:600]}")
    print(f"{len(set(a) | set(b)) - bad} identical, {bad} different")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree", nargs="?")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--work", default=None, help="folder for the run directories (default: a temporary one)")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    opts = ap.parse_args()
    if opts.compare:
        sys.exit(compare(*opts.compare))
    if not opts.tree or not opts.out:
        ap.error("give TREE and OUT.json, or --compare BEFORE AFTER")
    global _env
    tree = os.path.abspath(opts.tree)
    _env = dict(os.environ, PYTHONPATH=tree, OPENBLAS_NUM_THREADS="1", DISTNET_RUNS_DIR="/tmp")
    import tempfile
    work = opts.work or tempfile.mkdtemp(prefix="fingerprint-")
    result = {}
    for name in opts.cases.split(","):
        result[name] = fingerprint(tree, name, work)
        print(f"{name}: {len(result[name]['metrics'])} metric lines", flush=True)
    with open(opts.out, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)


_env = dict(os.environ)

if __name__ == "__main__":
    main()
