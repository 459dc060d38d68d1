"""distnet distribute: neon's recipe applied to YAML text, written in the file's own spelling."""
from pathlib import Path

from distnet.cli.distribute import distribute_text
from distnet.config import load_experiment_text

ROOT = Path(__file__).resolve().parents[2]


def test_neon_paths_stay_neon_paths():
    src = (ROOT / "experiments" / "neon_mnist_numpy_cnn-20-50-500-10.yaml").read_text()
    out = distribute_text(src)
    assert "!obj:neon.models.convnet_dist.ConvnetDist" in out
    assert out.count("!obj:neon.models.layer.ConvLayerDist") == 2
    assert out.count("dist_flag: True") == 2
    exp = load_experiment_text(out, "d.yaml")
    assert exp.dist_flag and type(exp.model).__name__ == "ConvnetDist"
    assert [type(l).__name__ for l in exp.model.layers][-1] == "LayerWithNoBiasDist"


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
