"""neon's model names (MLP, Convnet, ConvnetDist, GBDist) are aliases of Model and GB; what a
message says about a model is the name the experiment file wrote."""
import pytest

from distnet.config import load_experiment_text
from distnet.config.builder import config_name
from distnet.errors import ConfigError
from distnet.models import GB, Model
from tests.tiny import CNN, experiment, write_data


@pytest.fixture(autouse=True)
def _logger(restore_logger):
    """Experiments configure the distnet logger: restored after each test (tests/conftest.py)."""


@pytest.mark.parametrize("name, cls", [("MLP", Model), ("Convnet", Model), ("ConvnetDist", Model),
                                       ("neon.models.mlp.MLP", Model), ("GB", GB), ("GBDist", GB)])
def test_aliases_build_the_one_class(name, cls):
    from distnet.config import registry
    assert registry.resolve(name)[0] is cls


def test_messages_name_the_class_the_file_wrote(tmp_path):
    text = experiment(CNN, write_data(tmp_path / "d.h5"))
    model_path = next(w for w in text.split() if w.startswith("!obj:") and "models" in w)
    written = text.replace(model_path, "!obj:distnet.models.ConvnetDist")
    assert config_name(load_experiment_text(written, "e.yaml").model) == "ConvnetDist"
    with pytest.raises(ConfigError, match=r"unknown key for ConvnetDist; valid keys"):
        load_experiment_text(written.replace("num_epochs:", "num_epoch:"), "e.yaml")
