"""Run directories: every ``distnet run`` leaves a record of itself (written by world rank 0).

Default location ``runs/<experiment stem>-<YYYYmmdd-HHMMSS>`` (under ``$DISTNET_RUNS_DIR``
instead of ``runs`` when that is set; ``-2``, ``-3``, ... if the name is taken), or the
``--run-dir`` given. Contents::

    experiment.yaml   the experiment file as given (a copy of its text)
    resolved.yaml     the experiment with the command-line overrides applied (runnable)
    run.json          command, overrides, resume source, topology (size, grid, data, pipe),
                      versions (``distnet info``), status (running / finished / failed + the
                      error), start and end times, timings (setup, restore, data, train, eval,
                      total seconds), the checkpoint path
    metrics.jsonl     one JSON line per epoch: epoch, cost, seconds (wall time of the epoch),
                      test_misclass / train_misclass when evaluated (``eval_every``), then a
                      final line ``{"final": true, train_misclass, test_misclass, size, grid}``
    checkpoint.h5     the model checkpoint (:mod:`distnet.models.checkpoint`), unless disabled

A directory named with ``--run-dir`` that already holds a run (a ``run.json``) is refused:
nothing already written is overwritten.
"""
import datetime
import json
import os
import sys

import yaml

from ..config.yaml_loader import yaml12_numbers
from ..errors import DistnetError

ENV_BASE = "DISTNET_RUNS_DIR"


class RunDirError(DistnetError):
    """A run directory that cannot be used."""


# ---------------------------------------------------------------------------------------------
# The resolved experiment
# ---------------------------------------------------------------------------------------------

@yaml12_numbers   # a string such as '1e-3' is written quoted (it reads back as a number)
class _Dumper(yaml.SafeDumper):
    pass


def _represent_obj(dumper, spec):
    return dumper.represent_mapping(f"!obj:{spec.path}", spec.kwargs.items(), flow_style=False)


def _represent_tuple(dumper, value):
    return dumper.represent_list(list(value))


def dump_tree(tree):
    """YAML text of a parsed experiment tree (:class:`~distnet.config.ObjSpec` nodes become
    ``!obj:`` tags; an object used twice becomes an anchor and an alias, as in the file)."""
    from ..config.yaml_loader import ObjSpec
    _Dumper.add_representer(ObjSpec, _represent_obj)
    _Dumper.add_representer(tuple, _represent_tuple)
    return yaml.dump(tree, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


def experiment_config(path, overrides=()):
    """``{source, yaml, resolved, overrides}``: the experiment file's text, and the same with
    ``overrides`` applied (as YAML text that builds the experiment that runs)."""
    from ..config.overrides import apply_overrides
    from ..config.yaml_loader import parse_file
    with open(path, encoding="utf-8") as f:
        text = f.read()
    resolved = dump_tree(apply_overrides(parse_file(path), list(overrides)))
    head = f"# {path}" + "".join(f"\n#   --set {o}" for o in overrides) + "\n"
    return {"source": os.path.abspath(path), "yaml": text, "resolved": head + resolved,
            "overrides": list(overrides)}


# ---------------------------------------------------------------------------------------------
# Versions
# ---------------------------------------------------------------------------------------------

def versions():
    """``distnet info``'s stack as a dict, without starting MPI in a one-process run."""
    from .stack import stack_info
    return dict(stack_info(init_mpi=False))


# ---------------------------------------------------------------------------------------------
# The directory
# ---------------------------------------------------------------------------------------------

def default_run_dir(experiment_path, base=None, now=None):
    """``<base>/<stem>-<YYYYmmdd-HHMMSS>`` (base: ``$DISTNET_RUNS_DIR`` or ``runs``)."""
    base = base or os.environ.get(ENV_BASE) or "runs"
    stem = os.path.splitext(os.path.basename(experiment_path))[0] or "run"
    stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    return os.path.join(base, f"{stem}-{stamp}")


def _now():
    return datetime.datetime.now().isoformat(timespec="seconds")


class RunDir:
    """Writes one run's directory. Create with :meth:`create` (rank 0 only)."""

    def __init__(self, path):
        self.path = path
        self.info = {}

    @classmethod
    def create(cls, path=None, experiment_path="run.yaml"):
        """Make the directory: ``path`` (must not hold a run yet) or a fresh default name."""
        if path:
            if os.path.exists(os.path.join(path, "run.json")):
                raise RunDirError(f"run directory {path} already holds a run (run.json); give another "
                                  "--run-dir or remove it")
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as e:
                raise RunDirError(f"cannot create run directory {path}: {e.strerror}") from None
            return cls(path)
        base = default_run_dir(experiment_path)
        for i in range(1, 1000):
            candidate = base if i == 1 else f"{base}-{i}"
            try:
                os.makedirs(candidate)
                return cls(candidate)
            except FileExistsError:
                continue
            except OSError as e:
                raise RunDirError(f"cannot create run directory {candidate}: {e.strerror}") from None
        raise RunDirError(f"cannot find a free run directory name like {base}")

    def file(self, name):
        return os.path.join(self.path, name)

    def _write_text(self, name, text):
        from ..fileio import atomic_target, umask_mode
        with atomic_target(self.file(name)) as tmp:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            umask_mode(tmp)

    def start(self, config, command=None, resume=None, checkpoint=None):
        """Write the experiment, the resolved experiment and ``run.json`` (status running)."""
        if config:
            self._write_text("experiment.yaml", config["yaml"])
            self._write_text("resolved.yaml", config["resolved"])
        self.info = {"command": command if command is not None else sys.argv,
                     "experiment": config.get("source") if config else None,
                     "overrides": config.get("overrides", []) if config else [],
                     "resume": os.path.abspath(resume) if resume else None,
                     "checkpoint": os.path.abspath(checkpoint) if checkpoint else None,
                     "status": "running", "started": _now()}
        self.save_info()
        open(self.file("metrics.jsonl"), "w").close()

    def save_info(self):
        self._write_text("run.json", json.dumps(self.info, indent=2, default=str) + "\n")

    def topology(self, topology, versions_dict):
        self.info["topology"] = {"size": topology.size, "grid": list(topology.grid),
                                 "data": topology.ndata, "pipe": topology.npipe}
        self.info["versions"] = versions_dict
        self.save_info()

    def metrics(self, record):
        with open(self.file("metrics.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")

    def finish(self, status, error=None, timings=None):
        self.info.update(status=status, finished=_now())
        if error:
            self.info["error"] = error
        if timings:
            self.info["timings"] = timings
        self.save_info()


# ---------------------------------------------------------------------------------------------
# Reading runs back (plots)
# ---------------------------------------------------------------------------------------------

def read_metrics_file(path):
    """``(epoch records, final record or {})`` of a metrics JSON-lines file."""
    epochs, final = [], {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DistnetError(f"{path}:{n}: not a JSON line ({e.msg})") from None
            if rec.get("final"):
                final = rec
            elif "epoch" in rec:
                epochs.append(rec)
    return epochs, final


def read_run(path):
    """A run directory (or a metrics ``.jsonl`` file) -> ``{label, epochs, final, info}``."""
    if os.path.isdir(path):
        metrics = os.path.join(path, "metrics.jsonl")
        if not os.path.exists(metrics):
            raise DistnetError(f"{path} is not a run directory (no metrics.jsonl)")
        info = {}
        if os.path.exists(os.path.join(path, "run.json")):
            with open(os.path.join(path, "run.json")) as f:
                info = json.load(f)
    elif os.path.isfile(path):
        metrics, info = path, {}
    else:
        raise DistnetError(f"{path}: no such run directory or metrics file")
    epochs, final = read_metrics_file(metrics)
    return {"label": run_label(path, info), "epochs": epochs, "final": final, "info": info}


def run_label(path, info):
    name = os.path.basename(os.path.normpath(path))
    topo = info.get("topology")
    if not topo:
        return name
    size, (py, px), data = topo["size"], topo["grid"], topo.get("data", 1)
    where = "1 process" if size == 1 else f"{size} ranks, grid {py}x{px}" + (f", data {data}" if data > 1 else "")
    return f"{name} ({where})"
