"""``distnet predict`` of a per-pixel model (images or volumes): each rank computes its tile of
the class maps of a batch, and world rank 0 receives the tiles of one image grid row by grid row
(a volume's: grid slab by grid slab) and writes them out
(:class:`~distnet.data.mask_files.BandAssembler`, :class:`~distnet.data.mask_files.MaskWriter`).

Peak memory per rank, beyond the images it reads: its tile of one batch's outputs ``(B, K, h,
w)`` (``(B, K, d, h, w)``); on rank 0 besides one band of ``tile rows x W`` labels (uint8; a
volume's slab of ``tile slices x H x W``) and one received tile of ``K x h x w`` probabilities
(float32). No rank holds a whole image's maps.
"""
import itertools

import numpy as np

from ..backend import under_seterr_handling
from ..errors import ConfigError, TrainingError


def check_maskable(exp):
    """ConfigError (every rank alike) unless ``exp``'s model gives maps ``distnet predict`` can
    write as masks: of images or volumes, from one pipeline stage, at most 256 classes (a
    mask's byte per pixel)."""
    from ..data.mask_png import MAX_CLASSES
    from ..geometry.partition import shape_text
    model = exp.model
    plane = tuple(model.input_shape[1:])
    if len(plane) not in (2, 3):
        raise ConfigError(f"distnet predict writes masks of images and volumes; this model's outputs are "
                          f"{len(plane)}-D maps {shape_text(plane)}, which it does not write")
    if exp.topology.npipe > 1:
        raise ConfigError("distnet predict writes masks from one pipeline stage; give --set pipe=1")
    if nclasses(model) > MAX_CLASSES:
        raise ConfigError(f"a mask PNG colours at most {MAX_CLASSES} classes; this model has {nclasses(model)}")


def nclasses(model):
    """The number of classes of a per-pixel model (a logistic output's one map: two)."""
    return model.cost.classes_of(model.layers[-1].out_shape[0])


def mask_grid(exp):
    """The grid the output maps are tiled by: the run's spatial grid where it cuts the images,
    else ``(1, 1)`` (``(1, 1, 1)``: every rank computes whole images)."""
    t = exp.topology
    cut = exp.dist_flag and any(int(g) > 1 for g in t.grid)
    return tuple(int(g) for g in t.grid) if cut else (1,) * len(t.grid)


def _owners(t, cut):
    """``{(data replica, tile coords): world rank}`` of the ranks whose outputs are written: every
    spatial rank of a cut grid, else the first of each replica (whole images everywhere)."""
    coords = tuple(int(c) for c in t.coords)
    mine = (t.data_index, coords) if cut else ((t.data_index, (0,) * len(coords)) if not any(coords) else None)
    owners = {}
    for rank, key in enumerate(t.world.allgather(mine)):
        if key is not None:
            owners.setdefault(key, rank)
    return owners


@under_seterr_handling
def predict_masks(exp, read_images, receive, probabilities=False, prepare=None):
    """The masks (and, with ``probabilities``, the class probabilities) of new images, after
    :func:`~.evaluate.restore_trained`, handed to ``receive(key, arrays)`` on world rank 0 (a
    :meth:`BandAssembler.receive <distnet.data.mask_files.BandAssembler.receive>`): ``key``
    ``(image, iy, ix)`` (a volume's ``(image, iz, iy, ix)``) in image order, grid row by grid
    row; ``arrays`` the tile's labels ``(h, w)`` uint8 (the argmax class; the ignore label is
    never predicted) and its probabilities ``(K, h, w)`` float32 (a volume's ``(d, h, w)``,
    ``(K, d, h, w)``). ``read_images`` and ``prepare`` as for
    :func:`~.evaluate.predict_images`; the tiles are cut by :func:`mask_grid`. Collective
    over the run's world."""
    from ..comm.abort import run_collectively
    from ..comm.reduce import allreduce_sum
    from ..comm.to_root import stream_to_root
    from ..geometry import tile_of
    check_maskable(exp)
    t, model = exp.topology, exp.model
    grid = mask_grid(exp)
    cut = any(g > 1 for g in grid)
    plane = tuple(model.input_shape[1:])
    x = run_collectively(read_images, t.world, exp.dataset.rank_tile(t.grid, t.coords) if cut else None)
    x = (prepare or exp.dataset.prepare_images)(x, exp.backend.dtype)
    owners, nmaps = _owners(t, cut), model.layers[-1].out_shape[0]
    bs = model.batch_size or len(x)
    for b in range(0, len(x), bs):
        idx = np.arange(b, min(b + bs, len(x)))
        out = np.asarray(model.predict(x[b:b + bs]), dtype=np.float64)   # my replica's rows, my tile
        bad = np.array([np.count_nonzero(~np.isfinite(out))], dtype=np.float64)
        allreduce_sum([bad], t.world)
        if bad[0]:
            raise TrainingError("the model's outputs are not finite (NaN or inf) for some pixels, so no masks can "
                                "be written; check the checkpoint's weights and the images' scale (the "
                                "training's scale, mean and std apply to them)")
        labels = model.cost.predicted(out).astype(np.uint8)
        probs = model.cost.probabilities(out).astype(np.float32) if probabilities else None
        row = {int(i): j for j, i in enumerate(model.replica_rows(idx))}
        plan = []
        for d, part in enumerate(np.array_split(idx, t.ndata)):
            for i in part:
                for coords in itertools.product(*(range(g) for g in grid)):   # the first axis slowest
                    shape = tile_of(plane, grid, coords).shape
                    specs = [(shape, np.uint8)] + ([((nmaps,) + shape, np.float32)] if probabilities else [])
                    plan.append((owners[(d, coords)], (int(i),) + coords, specs))
        plan.sort(key=lambda p: p[1])   # image order, band by band, whichever replica computed it

        def mine(key):
            j = row[key[0]]
            return [labels[j]] + ([probs[j]] if probabilities else [])
        stream_to_root(t.world, plan, mine, receive)
