"""benchmarks/volume_memory.py and its ScaFFold-shaped 3-D U-Net (benchmarks/experiments/
unet3d_bench*.yaml): the net cut over ranks computes the one-process numbers (`distnet compare` in
float64), and the benchmark runs end to end on a tiny volume, its plan columns those of
`distnet plan --json` (calibrated) and its error columns those of the figures beside them."""
import json
import re
import subprocess
import sys

from tests.test_cli import ROOT, _demo_volumes_h5, distnet

BENCH = ROOT / "benchmarks" / "experiments"


def test_benchmark_unet_on_two_ranks_equals_one_process(tmp_path):
    data = _demo_volumes_h5(tmp_path, shape=(8, 8, 8))
    proc = distnet("compare", str(BENCH / "unet3d_bench.yaml"), str(BENCH / "unet3d_bench_dist.yaml"), "-n", "2",
                   "--set", f"datasets.0.path={data}", "--set", "backend.dtype=float64", "--cost-tol", "1e-9",
                   "--rate-tol", "0", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "grid 2x1x1" in proc.stdout + proc.stderr
    assert re.search(r"-> AGREE$", proc.stdout.strip())


def _planned_mib(path, nranks, size):
    proc = distnet("plan", str(path), "-n", str(nranks), "--input-shape", f"1,{size},{size},{size}", "--batch", "1",
                   "--json", cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rank = json.loads(proc.stdout)["memory"]["rank"]
    return rank["total"] / 2**20, rank["activations"] / 2**20


def test_volume_memory_benchmark_end_to_end(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "volume_memory.py"), "--size", "8", "--ranks", "2",
                           "--epochs", "1", "--budget-mib", "4096"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {int(m[0]): m for m in re.findall(r"^\s+(\d+)\s+(\d+)M\s+(\d+)M\s+(\d+)M\s+(\d+)M\s+(\d+)M\s+([-+]\d+)%\s+"
                                             r"(\w+)\s+\S+%\s+([\d.]+)\s+([\d.]+)\s+([-+]\d+)%", proc.stdout, re.M)}
    assert sorted(rows) == [1, 2], proc.stdout
    for n, path in ((1, BENCH / "unet3d_bench.yaml"), (2, BENCH / "unet3d_bench_dist.yaml")):
        _, peak, base, above, total, act, mem_err, budget, step, plan_step, time_err = rows[n]
        want_total, want_act = _planned_mib(path, n, 8)
        # the plan's memory (the calibrated machine adds only the MPI library's) and its errors
        assert round(want_act) == int(act) and int(total) >= round(want_total)
        assert int(peak) > int(base) and budget == "fits"
        assert abs(int(mem_err) - 100 * (int(total) - int(above)) / int(above)) <= 100 * 1.5 / int(above) + 1
        assert abs(int(time_err) - 100 * (float(plan_step) - float(step)) / float(step)) <= 100 * 0.01 / float(step) + 1
    assert "step time" in proc.stdout and "plan calibrated on this machine" in proc.stdout
