"""The versions ``distnet info`` and ``run.json`` report are those pip reports."""
import warnings
from importlib import metadata

from distnet.experiments.stack import _version, stack_info


def test_versions_are_the_installed_distributions():
    # click 8.2+ hides __version__ behind a deprecated module __getattr__: the report said
    # 'click: installed' instead of its version
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        rows = dict(stack_info(init_mpi=False, probe_gpu=False))
    assert rows["click"] == metadata.version("click")
    assert rows["pyyaml"] == metadata.version("PyYAML")
    assert rows["h5py"] == metadata.version("h5py")


def test_a_module_that_cannot_be_imported_is_reported():
    assert _version("distnet_no_such_module") == "not available (ModuleNotFoundError)"
