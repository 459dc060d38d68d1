"""Experiment files: YAML text -> validated distnet objects. No MPI, no arrays."""
from .builder import Builder, config_error
from .yaml_loader import ObjSpec, parse_file, parse_yaml, read_text


def load_experiment(path, overrides=(), gpu_as_cpu=False, text=None, settings=(), record=False):
    """Parse and build the experiment in ``path``, after applying ``key.path=value`` overrides
    and ``settings`` (what run options set: :func:`~distnet.config.overrides.apply_settings`);
    raises ConfigError with file:line on problems. ``gpu_as_cpu``: build a GPU backend as the CPU
    one (``distnet check`` on a machine without a GPU; a note says so). ``text``: the file's
    text as another process read it (the ranks of a job build from rank 0's), not read here.
    ``record``: the experiment keeps what it was built from as its ``config_record``
    (:func:`~distnet.config.resolved.experiment_config`: checkpoints store it)."""
    from .overrides import apply_overrides, apply_settings
    if text is None:
        text = read_text(path)
    tree = apply_settings(apply_overrides(parse_yaml(text, str(path)), overrides), settings)
    root = _build_root(tree, str(path), gpu_as_cpu)
    if record:
        from .resolved import experiment_config
        root.config_record = experiment_config(path, overrides, text, settings)
    return root


def load_experiment_text(text, filename="<string>"):
    """Like :func:`load_experiment` for YAML text (tests, ``distnet check -``)."""
    return _build_root(parse_yaml(text, filename), filename)


def _gpu_as_cpu(tree, notes):
    """Every GPU backend node of ``tree`` becomes the CPU backend (its GPU-only keys dropped)."""
    import logging

    from . import registry
    from .neon_compat import _walk
    for node in _walk(tree):
        if not isinstance(node, ObjSpec):
            continue
        try:
            cls, kind = registry.resolve(node.path)
        except Exception:  # noqa: BLE001 - an unknown class: the builder reports it
            continue
        if kind == "backend" and cls.__name__ == "GPU":
            for key in ("device", "cuda_aware_mpi"):
                node.kwargs.pop(key, None)
            notes.append((logging.WARNING, f"{node.where}: no usable GPU here: the GPU backend "
                          f"(!obj:{node.path}) was checked as the CPU backend"))
            node.path = "distnet.backends.CPU"


def _build_root(tree, filename, gpu_as_cpu=False):
    from ..errors import ConfigError
    from .neon_compat import translate
    if not isinstance(tree, ObjSpec):
        raise ConfigError("the file's root must be an experiment, e.g. "
                          "!obj:distnet.experiments.FitPredictErrorExperiment {...}", filename)
    notes = list(tree.parse_notes)
    translate(tree, notes)
    if gpu_as_cpu:
        _gpu_as_cpu(tree, notes)
    builder = Builder()
    root = builder.build(tree)
    if builder.kind_of(root) != "experiment":
        raise ConfigError(f"the root object is {tree.path}, not an experiment "
                          "(FitExperiment or FitPredictErrorExperiment)", tree.where)
    root.source_path = filename
    #: ``(logging level, text)`` about neon keys translated or ignored, and keys the built
    #: objects do not use (``build_notes``); logged when it runs, printed by ``distnet check``.
    root.config_notes = notes + builder.notes + list(root.build_notes())
    return root


__all__ = ["Builder", "ObjSpec", "config_error", "load_experiment", "load_experiment_text",
           "parse_file", "parse_yaml"]
