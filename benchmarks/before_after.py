"""Before / after / PyTorch step times in one interleaved run (the same machine load for all three):
``python benchmarks/before_after.py BEFORE_TREE AFTER_TREE [rounds] [workloads] [threads]``: for every
workload and round a fresh ``benchmarks/worker.py`` process per arm (each tree's own worker imports
its own distnet; PyTorch runs the AFTER tree's twin), arms alternating order round by round;
prints median step ms, the ratios and the per-round spread as a markdown table."""
import json, os, statistics, subprocess, sys
base, new = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
workloads = (sys.argv[4] if len(sys.argv) > 4 else "mnist_cnn,bigimage,gb_train,gb_pretrain,local").split(",")
threads = sys.argv[5] if len(sys.argv) > 5 else "2"
py = sys.executable
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
env = dict(os.environ, OPENBLAS_NUM_THREADS=threads, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
env.pop("OPENBLAS_CORETYPE", None); env.pop("OPENBLAS_L2_SIZE", None)
arms = [("before", base, "distnet"), ("after", new, "distnet"), ("torch", new, "torch")]
res = {w: {a[0]: [] for a in arms} for w in workloads}
loss = {w: {} for w in workloads}
print("load at start", os.getloadavg(), flush=True)
for r in range(rounds):
    for w in workloads:
        order = arms if r % 2 == 0 else arms[::-1]
        for tag, tree, fw in order:
            steps = "3" if w == "bigimage" else "15"
            out = subprocess.run([py, os.path.join(tree, "benchmarks/worker.py"), "--framework", fw,
                                  "--workload", w, "--threads", threads, "--steps", steps,
                                  "--warmup", "1" if w == "bigimage" else "3"],
                                 cwd=ROOT, env=env, capture_output=True, text=True)
            line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
            if not line:
                print(tag, w, out.stderr[-1500:], flush=True); continue
            d = json.loads(line[0][7:])
            res[w][tag].append(statistics.median(d["step_times"]))
            loss[w][tag] = d.get("first_loss", d.get("loss"))
        print(f"round {r} {w}: " + "  ".join(f"{t} {res[w][t][-1]*1e3:.1f}" for t, _, _ in arms if res[w][t]), flush=True)
print("load at end", os.getloadavg())
print("| workload | before ms | after ms | PyTorch ms | after / before speed-up | before / PyTorch | after / PyTorch (per-round spread) | first loss before / after / torch |")
print("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
for w in workloads:
    b, a, t = (res[w][k] for k in ("before", "after", "torch"))
    mb, ma, mt = statistics.median(b), statistics.median(a), statistics.median(t)
    per = sorted(tt / aa for aa, tt in zip(a, t))
    perb = [tt / bb for bb, tt in zip(b, t)]
    print(f"| {w} | {mb*1e3:.1f} | {ma*1e3:.1f} | {mt*1e3:.1f} | {statistics.median([bb/aa for aa, bb in zip(a, b)]):.2f}x "
          f"| {statistics.median(perb):.2f}x | {statistics.median(per):.2f}x ({per[0]:.2f}-{per[-1]:.2f}) "
          f"| {loss[w].get('before')} / {loss[w].get('after')} / {loss[w].get('torch')} |")
