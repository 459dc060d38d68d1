"""``MLPDist``: neon's vector-parallel (``vecpar``) MLP — every fully connected layer sharded over
the ranks by blocks of its input features.

Every rank holds the whole input (whole images: the dataset's ``dist_mode: vecpar``) and every
layer's whole (replicated) output. Layer ``l`` with ``F`` input features views them as a
``1 x F`` plane cut by the ``1 x P`` process grid (:func:`~distnet.geometry.tile_of`, contiguous
blocks, the first ``F % P`` one longer), so rank ``j`` holds the columns ``W[:, o_j : o_j + n_j]``:

* forward: ``z = sum_j x[:, block_j] W_j^T`` — my partial product, then ONE Allreduce over
  ``Topology.spatial`` (all ranks of a replica / stage); every rank adds the bias and applies the
  activation itself (no root, no bcast);
* backward: ``dz`` is replicated, so ``G_j = dz^T x[:, block_j]`` is complete on rank ``j`` (no
  weight communication; data replicas sum it); the input gradient ``dz W`` is assembled from the
  blocks with one Allreduce over ``Topology.spatial`` (skipped for the first layer).

The numbers equal the single-process MLP's up to the summation order of ``z``. Composes with
data replicas (``data: D``: ``world = D x 1 x P``) and pipeline stages (each stage shards its
layers over its own spatial communicator).
"""
from ..config.builder import config_name
from ..layers.fc import FullyConnectedNoBiasLayer
from ..layers.placement import REPLICATED
from .model import Model


class MLPDist(Model):
    """neon's ``MLPDist`` (see :class:`~distnet.models.model.Model` for the keys): fully connected layers only
    (``Layer``, ``LayerWithNoBias``, or neon's ``LayerDist`` / ``LayerWithNoBiasDist``: the same
    classes), each sharded by input-feature blocks. Its data is whole images on every rank
    (``dist_mode: vecpar``); the process grid is ``1 x P``.

    This model stays a class of its own because it changes the layout, which no layer can infer
    from its input: every rank takes whole images (not its spatial tile) and every FC layer,
    although its input is replicated, shards its weight columns by feature blocks (``vecpar``)
    instead of being replicated."""

    #: Every rank takes the whole input (not a spatial tile).
    input_layout = REPLICATED

    def check_layers(self):
        """Every layer but the fully connected ones is refused at the layer's line (the
        experiment calls this as the file is read: ``check`` and ``run`` stop there, before
        anything runs)."""
        for layer in self.layers:
            if not isinstance(layer, FullyConnectedNoBiasLayer):
                raise layer.error(
                    f"{config_name(self)} shards fully connected layers by input features "
                    f"(vecpar) and cannot hold a {config_name(layer)}: distribute a network with "
                    "convolution / pooling / local layers as ConvnetDist (GBDist for GB) with Dist "
                    "layers and dist_mode: halopar (spatial tiles), or as data replicas (dist_mode: "
                    "datapar, model MLP/Convnet); in MLPDist use LayerDist / LayerWithNoBiasDist")

    def _shard_by_features(self):
        """Every FC layer shards its features (what its placement reads), whatever asks first:
        a run (:meth:`configure`) or ``distnet show`` / ``plan`` (:meth:`placements`, which
        described the layers as replicated when only ``configure`` set it)."""
        self.check_layers()
        for layer in self.layers:
            layer.vecpar = True

    def placements(self, position):
        self._shard_by_features()
        return super().placements(position)

    def configure(self, backend, topology):
        self._shard_by_features()
        super().configure(backend, topology)

    def planes(self):
        """Each FC layer's input features as a ``1 x F`` plane: the grid that fits them all is
        ``1 x P`` with ``P <= min F`` (every rank holds at least one feature of every layer)."""
        return [(1, layer.nfeat) for layer in self.layers]
