"""The plan as text: one row per layer, the totals, memory per rank and node, the step time,
the throughput and the warnings."""
from .memory import memory_totals


def _fmt_bytes(n):
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _fmt_shape(s):
    return "x".join(str(v) for v in s) if s else "-"


def format_plan(plan, data_bytes=None):
    """The plan as a text table (one row per layer), then totals, memory per rank and per node
    (``data_bytes``: a rank's data, see :func:`~distnet.plan.memory.memory_totals`), the
    predicted step time, the job's throughput and the warnings."""
    m = plan.machine
    per_node = min(m.ranks_per_node or plan.nranks, plan.nranks)
    nodes = -(-plan.nranks // per_node)
    head = (f"plan: {plan.nranks} rank(s) = data {plan.data} x pipe {plan.pipe} x grid "
            f"{_fmt_shape(plan.grid)} on {nodes} node(s) of {per_node} rank(s), batch "
            f"{plan.batch_global or plan.batch} ({plan.batch} per replica), {plan.itemsize}-byte numbers; "
            f"in a node alpha {m.alpha:g} s, beta {m.beta:g} B/s; between nodes alpha {m.alpha_inter:g} s, "
            f"beta {m.beta_inter:g} B/s per node; {m.flop_rate:g} FLOP/s, {m.mem_rate:g} B/s memory per rank")
    cols = ["#", "layer", "kind", "tile", "chunk", "halo fwd", "halo bwd", "msgs", "allreduce",
            "GFLOP", "act mem", "time ms"]
    rows = []
    for lp in plan.layers:
        rows.append([str(lp.index), lp.name, lp.kind, _fmt_shape(lp.tile), _fmt_shape(lp.chunk),
                     _fmt_bytes(lp.halo_fwd_max), _fmt_bytes(lp.halo_bwd_max), str(lp.halo_msgs_max),
                     _fmt_bytes(lp.allreduce_grad + lp.allreduce_act), f"{lp.flops_max / 1e9:.3f}",
                     _fmt_bytes(lp.act_bytes_max), f"{sum(lp.time.values()) * 1e3:.2f}"])
    t = plan.totals()
    rows.append(["", "total", "", "", "", _fmt_bytes(t["halo_fwd_max"]), _fmt_bytes(t["halo_bwd_max"]),
                 str(t["halo_msgs_max"]), _fmt_bytes(t["allreduce_grad"] + t["allreduce_act"]),
                 f"{t['flops_max'] / 1e9:.3f}", _fmt_bytes(t["act_bytes_max"]),
                 f"{t['time']['step'] * 1e3:.2f}"])
    widths = [max(len(r[j]) for r in rows + [cols]) for j in range(len(cols))]
    lines = [head, "  ".join(c.rjust(w) if j >= 3 else c.ljust(w) for j, (c, w) in enumerate(zip(cols, widths)))]
    for r in rows:
        lines.append("  ".join(c.rjust(w) if j >= 3 else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))))
    tt = t["time"]
    lines.append(f"per rank per step (largest rank): halo {_fmt_bytes(t['halo_fwd_max'] + t['halo_bwd_max'])} "
                 f"sent, allreduce payload {_fmt_bytes(t['allreduce_grad'] + t['allreduce_act'])}, "
                 f"{t['flops_max'] / 1e9:.3f} GFLOP, activations {_fmt_bytes(t['act_bytes_max'])}, "
                 f"parameters {_fmt_bytes(t['param_bytes'])}")
    lines.append(f"all ranks per step: halo {_fmt_bytes(t['halo_fwd_total'] + t['halo_bwd_total'])}"
                 + (f"; the largest rank sends {_fmt_bytes(t['halo_inter_max'])} of its halo to other nodes"
                    if nodes > 1 and t["halo_fwd_total"] else ""))
    mem = memory_totals(plan, data_bytes)
    r, n = mem["rank"], mem["node"]
    lines.append(f"memory per rank: {_fmt_bytes(r['total'])} = parameters {_fmt_bytes(r['parameters'])} + "
                 f"gradients {_fmt_bytes(r['gradients'])} + optimiser state {_fmt_bytes(r['optimizer'])} + "
                 f"activations {_fmt_bytes(r['activations'])} + workspace {_fmt_bytes(r['workspace'])} + "
                 f"temporaries {_fmt_bytes(r['transient'])} + data {_fmt_bytes(r['data'])}"
                 + ("" if data_bytes is not None else " (one minibatch)")
                 + (f" + MPI {_fmt_bytes(r['runtime'])}" if r["runtime"] else ""))
    lines.append(f"checkpoint, per rank: sharded save +{_fmt_bytes(r['checkpoint_save'])}, restore "
                 f"+{_fmt_bytes(r['checkpoint_restore'])} (one array in flight); single file: save "
                 f"+{_fmt_bytes(r['single_file_save'])} on rank 0, restore +{_fmt_bytes(r['single_file_restore'])}")
    lines.append(f"memory per node ({n['ranks']} rank(s)): {_fmt_bytes(n['total'])} training, "
                 f"{_fmt_bytes(n['checkpoint_restore'])} while restoring a sharded checkpoint")
    lines.append(f"predicted step: {tt['step'] * 1e3:.2f} ms = compute {tt['compute'] * 1e3:.2f} + memory "
                 f"{tt['memory'] * 1e3:.2f} + halo {tt['halo'] * 1e3:.2f} + allreduce "
                 f"{tt['allreduce'] * 1e3:.2f} ms -> {t['images_per_s']:.1f} images/s for the job"
                 + (f" ({t['images_per_s_replica']:.1f} per replica)" if plan.data > 1 else ""))
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines)
