"""The resolved experiment: the parsed tree, with the command line's ``--set`` overrides and the
run options' settings applied, dumped back to YAML (``resolved.yaml`` of a run directory, the
``config`` a checkpoint keeps). Building that text gives the experiment that ran."""
import os

import yaml

from .yaml_loader import ObjSpec, yaml12_numbers


@yaml12_numbers   # a string such as '1e-3' is written quoted (it reads back as a number)
class _Dumper(yaml.SafeDumper):
    pass


def _represent_obj(dumper, spec):
    return dumper.represent_mapping(f"!obj:{spec.path}", spec.kwargs.items(), flow_style=False)


def _represent_tuple(dumper, value):
    return dumper.represent_list(list(value))


_Dumper.add_representer(ObjSpec, _represent_obj)
_Dumper.add_representer(tuple, _represent_tuple)


def dump_tree(tree):
    """YAML text of a parsed experiment tree (:class:`~distnet.config.ObjSpec` nodes become
    ``!obj:`` tags; an object used twice becomes an anchor and an alias, as in the file)."""
    return yaml.dump(tree, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


def experiment_config(path, overrides=(), text=None, settings=()):
    """``{source, yaml, resolved, overrides}``: the experiment file's text (``text``: as read
    already, else read here), and the same with ``overrides`` (``--set``) and ``settings``
    (what run options set: :func:`~distnet.config.overrides.apply_settings`) applied, as YAML
    text that builds the experiment that runs, headed by the command line's words."""
    from .overrides import apply_overrides, apply_settings
    from .yaml_loader import parse_yaml
    if text is None:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    tree = apply_settings(apply_overrides(parse_yaml(text, str(path)), list(overrides)), settings)
    head = (f"# {path}" + "".join(f"\n#   --set {o}" for o in overrides)
            + "".join(f"\n#   {option}" for option, _, _ in settings) + "\n")
    return {"source": os.path.abspath(path), "yaml": text, "resolved": head + dump_tree(tree),
            "overrides": list(overrides)}
