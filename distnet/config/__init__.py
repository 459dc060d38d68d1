"""Experiment files: YAML text -> validated distnet objects. No MPI, no arrays."""
from .builder import Builder, config_error
from .yaml_loader import ObjSpec, parse_file, parse_yaml


def load_experiment(path, overrides=()):
    """Parse and build the experiment in ``path``, after applying ``key.path=value`` overrides;
    raises ConfigError with file:line on problems."""
    from .overrides import apply_overrides
    tree = apply_overrides(parse_file(path), overrides)
    return _build_root(tree, str(path))


def load_experiment_text(text, filename="<string>"):
    """Like :func:`load_experiment` for YAML text (tests, ``distnet check -``)."""
    return _build_root(parse_yaml(text, filename), filename)


def _build_root(tree, filename):
    from ..errors import ConfigError
    from .neon_compat import translate
    if not isinstance(tree, ObjSpec):
        raise ConfigError("the file's root must be an experiment, e.g. "
                          "!obj:distnet.experiments.FitPredictErrorExperiment {...}", filename)
    notes = list(getattr(tree, "parse_notes", ()))
    translate(tree, notes)
    builder = Builder()
    root = builder.build(tree)
    if builder.kind_of(root) != "experiment":
        raise ConfigError(f"the root object is {tree.path}, not an experiment "
                          "(FitExperiment or FitPredictErrorExperiment)", tree.where)
    root.source_path = filename
    #: ``(logging level, text)`` about neon keys translated or ignored; logged when it runs.
    root.config_notes = notes + builder.notes
    return root


__all__ = ["Builder", "ObjSpec", "config_error", "load_experiment", "load_experiment_text",
           "parse_file", "parse_yaml"]
