"""distnet distribute: neon's recipe applied to YAML text, written in the file's own spelling."""
from pathlib import Path

import pytest

from distnet.cli.distribute import distribute_text
from distnet.config import load_experiment_text
from distnet.config.builder import config_name
from distnet.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_neon_paths_stay_neon_paths():
    src = (ROOT / "experiments" / "neon_mnist_numpy_cnn-20-50-500-10.yaml").read_text()
    out = distribute_text(src)
    assert "!obj:neon.models.convnet_dist.ConvnetDist" in out
    assert out.count("!obj:neon.models.layer.ConvLayerDist") == 2
    assert out.count("dist_flag: True") == 2
    exp = load_experiment_text(out, "d.yaml")
    assert exp.dist_flag and config_name(exp.model) == "ConvnetDist"
    assert [config_name(l) for l in exp.model.layers][-1] == "LayerWithNoBiasDist"   # neon's alias, as written


def test_comments_kept_and_shard_paths_get_rank_and_size():
    src = ("# my experiment\n!obj:FitExperiment {\n  datasets: [!obj:MNIST {repo_path: d, "
           "serialized_path: c/mnist.h5}],\n  model: !obj:MLP {num_epochs: 1, layers: [\n"
           "    !obj:ConvLayer {nofm: 2, fshape: 3, weight_init: {type: uniform}},  # keep me\n"
           "    !obj:Layer {nout: 10, weight_init: {type: uniform}}]}}\n")
    out = distribute_text(src)
    assert out.startswith("# my experiment") and "# keep me" in out
    assert "!obj:ConvnetDist" in out and "!obj:ConvLayerDist" in out and "!obj:LayerDist" in out
    assert "c/mnist-{rank}of{size}.h5" in out
    assert "!obj:MNIST { dist_flag: True, repo_path: d," in out   # inline mapping stays readable
    assert load_experiment_text(out, "d.yaml").dataset.dist_flag


def _summary(exp):
    """What an experiment builds: classes, the datasets' distribution keys, every layer's keys."""
    return (config_name(exp.model), exp.dist_flag, exp.dataset.dist_flag, exp.dataset.dist_mode,
            [(type(l).__name__, l.nout, l.learning_rate) for l in exp.model.layers])


def test_vecpar_of_the_mlp_is_the_shipped_vecpar_experiment():
    src = (ROOT / "experiments" / "mnist_mlp.yaml").read_text()
    out = distribute_text(src, "mnist_mlp.yaml", "vecpar")
    shipped = load_experiment_text((ROOT / "experiments" / "mnist_mlp_vecpar.yaml").read_text(), "v.yaml")
    assert _summary(load_experiment_text(out, "d.yaml")) == _summary(shipped)
    assert _summary(shipped)[:4] == ("MLPDist", True, True, "vecpar")


def test_datapar_keeps_the_classes_and_gives_the_cache_its_rank():
    src = ("!obj:FitExperiment {\n  datasets: [!obj:MNIST {repo_path: d, serialized_path: c/m.h5}],\n"
           "  model: !obj:MLP {num_epochs: 1, layers: [!obj:Layer {nout: 10, weight_init: {type: uniform}}]}}\n")
    out = distribute_text(src, "m.yaml", "datapar")
    assert "!obj:MNIST { dist_flag: True, dist_mode: datapar, repo_path: d," in out
    # every rank reads whole images, but writes its own cache: a path without {rank} is
    # refused under mpiexec (the file distribute wrote could not run)
    assert "'c/m-{rank}of{size}.h5'" in out
    exp = load_experiment_text(out, "d.yaml")
    assert _summary(exp)[:4] == ("MLP", True, True, "datapar")


def test_vecpar_refuses_models_with_spatial_layers():
    src = (ROOT / "experiments" / "mnist_cnn.yaml").read_text()
    with pytest.raises(ConfigError, match=r"^mnist_cnn.yaml:15: dist_mode vecpar distributes a fully connected "
                                          r"MLP, not Convnet"):
        distribute_text(src, "mnist_cnn.yaml", "vecpar")
    mixed = ("!obj:FitExperiment {\n  datasets: [!obj:MNIST {repo_path: d}],\n  model: !obj:MLP {num_epochs: 1, "
             "layers: [!obj:ConvLayer {nofm: 2, fshape: 3, weight_init: {type: uniform}},\n"
             "    !obj:Layer {nout: 10, weight_init: {type: uniform}}]}}\n")
    with pytest.raises(ConfigError, match=r"^m.yaml:3: .*also has ConvLayer"):   # the layer's line
        distribute_text(mixed, "m.yaml", "vecpar")
    # any name of a fully connected layer is sharded (distnet's own name has no Dist alias: kept)
    fc = mixed.replace("!obj:ConvLayer {nofm: 2, fshape: 3,", "!obj:FullyConnectedLayer {nout: 4,")
    out = distribute_text(fc, "m.yaml", "vecpar")
    assert "!obj:FullyConnectedLayer {nout: 4" in out and "!obj:LayerDist {nout: 10" in out


def test_neons_later_single_dataset_gets_dist_flag_too():
    """neon's later schema names one ``dataset:``; the experiment's dist_flag alone was refused
    when run ('its dataset has dist_flag: False')."""
    src = (ROOT / "tests" / "data" / "neon_later" / "mnist_halopar_cpu_cnn-20-50-500-10.yaml").read_text()
    plain = (src.replace("dist_flag: &id001 True", "dist_flag: &id001 False")
             .replace("ConvnetDist", "Convnet").replace("convnet_dist.Convnet", "mlp.MLP")
             .replace("ConvLayerDist", "ConvLayer").replace("MaxPoolingLayerDist", "MaxPoolingLayer")
             .replace("LayerDist", "Layer").replace("  dist_flag: *id001\n", ""))
    assert "dist_flag: *id001" not in plain and "Dist\n" not in plain
    out = distribute_text(plain, "plain.yaml")
    exp = load_experiment_text(out, "d.yaml")
    assert exp.dist_flag and exp.dataset.dist_flag and config_name(exp.model) == "ConvnetDist"


def test_an_experiment_without_dist_flag_is_refused_with_its_own_keys():
    """Seq2SeqExperiment has pipe/data instead: the output had a dist_flag that `distnet run`
    then refused as an unknown key (distribute itself said nothing, exit 0)."""
    src = (ROOT / "experiments" / "seq2seq_numbers.yaml").read_text()
    with pytest.raises(ConfigError, match=r"seq2seq_numbers.yaml:\d+: Seq2SeqExperiment has no dist_flag.*"
                                          r"`pipe` and `data`"):
        distribute_text(src, "seq2seq_numbers.yaml")


def test_an_unknown_experiment_class_is_refused_at_its_line():
    with pytest.raises(ConfigError, match=r"x.yaml:2: unknown class !obj:NoSuchExperiment"):
        distribute_text("# x\n!obj:NoSuchExperiment {model: 1}\n", "x.yaml")


def test_report_says_what_was_changed():
    src = (ROOT / "experiments" / "mnist_cnn.yaml").read_text()
    report = []
    distribute_text(src, "mnist_cnn.yaml", "halopar", report)
    assert report == ["dist_flag: True on the experiment and its dataset (halopar)",
                      "classes: ConvnetDist, ConvLayerDist x2, MaxPoolingLayerDist x2, LayerWithNoBiasDist x2"]
    src = src.replace("repo_path: ./datasets", "repo_path: ./datasets, serialized_path: c/m.pkl")
    report = []
    distribute_text(src, "mnist_cnn.yaml", "datapar", report)
    assert report == ["dist_flag: True on the experiment and its dataset (datapar)",
                      "shard paths: c/m-{rank}of{size}.pkl"]
