"""The U-Net of experiments/unet.yaml on the device: one process against 4 ranks (a 2x2 grid of
uneven tiles) in float64, and (on a GPU) the CPU run against the GPU run, each by ``distnet
compare``. The segmentation demo is written here with numpy and h5py in the layout of ``distnet
data convert --masks`` (the GPU machine has no Pillow to decode PNGs), and the GPU twins of the
two files are the files with the GPU backend, as experiments/mnist_cnn_gpu.yaml is mnist_cnn.yaml's.

    python bin/gpu-check.d/unet_check.py --out DIR [--cpu]

Exit status: non-zero when a comparison disagrees or fails.
"""
import argparse
import importlib.util
import os
import subprocess
import sys

import h5py
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FILES = ("experiments/unet.yaml", "experiments/unet_dist.yaml")


def write_demo(path, count=24, seed=0):
    """The segmentation demo's images and masks (``experiments/make_segmentation_demo.py``'s
    drawing) as an HDF5 data set: 3/4 train, the rest test."""
    spec = importlib.util.spec_from_file_location("demo", os.path.join(REPO, "experiments", "make_segmentation_demo.py"))
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    rng = np.random.RandomState(seed)
    pairs = [demo._shapes(rng, 37, 53) for _ in range(count)]
    x = np.stack([p[0].transpose(2, 0, 1) for p in pairs])
    y = np.stack([p[1] for p in pairs])
    cut = count * 3 // 4
    with h5py.File(path, "w") as f:
        for split, rows in (("train", slice(0, cut)), ("test", slice(cut, None))):
            f.create_dataset(f"{split}/x", data=x[rows], chunks=(1, 3, 37, 53))
            f.create_dataset(f"{split}/y", data=y[rows], chunks=(1, 37, 53))
        f.attrs["nclasses"] = len(demo.CLASSES)
        f.attrs["class_names"] = list(demo.CLASSES)
        f.attrs["ignore_label"] = 255


def gpu_twin(path, out):
    """``path`` with the GPU backend, written under ``out``; returns its path."""
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        text = f.read().replace("!obj:distnet.backends.Numpy {", "!obj:distnet.backends.GPU {")
    twin = os.path.join(out, os.path.basename(path).replace(".yaml", "_gpu.yaml"))
    with open(twin, "w", encoding="utf-8") as f:
        f.write(text)
    return twin


def compare(a, b, n, data, *extra):
    cmd = [sys.executable, "-m", "distnet", "compare", a, b, "-n", str(n), "--set", f"datasets.0.path={data}",
           "--set", "model.num_epochs=1", *extra]
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=REPO).returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for the data set and the GPU twins")
    ap.add_argument("--cpu", action="store_true", help="rehearsal: the CPU files only")
    opts = ap.parse_args()
    os.makedirs(opts.out, exist_ok=True)
    data = os.path.join(os.path.abspath(opts.out), "segmentation_demo.h5")
    write_demo(data)
    exact = ("--set", "backend.dtype=float64", "--cost-tol", "1e-9", "--rate-tol", "0")
    files = FILES if opts.cpu else tuple(gpu_twin(p, opts.out) for p in FILES)
    status = compare(*files, 4, data, *exact)
    if not opts.cpu:    # float32 on both: rounding apart, within compare's default tolerances
        status |= compare(FILES[0], files[0], 1, data)
    return 1 if status else 0


if __name__ == "__main__":
    sys.exit(main())
