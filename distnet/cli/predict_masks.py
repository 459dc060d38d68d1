"""``distnet predict`` of a per-pixel model: a mask PNG per image in ``-o OUT_DIR/`` and, with
``--probabilities OUT.h5``, the class maps (the work is in
:mod:`distnet.experiments.predict_masks`, the files in :mod:`distnet.data.mask_files`)."""
import contextlib
import os


def write_masks(job, exp, images, output, probabilities, record, pictures, force):
    """Predict and write the masks; returns the lines rank 0 prints. ``images(tile)`` reads
    this rank's tile of the images; ``pictures`` (rank 0) names them. Collective over the world."""
    from ..data.mask_files import BandAssembler, MaskWriter, class_colors, mask_names
    from ..experiments.predict_masks import mask_grid, nclasses, predict_masks
    from ..fileio import refuse_existing
    model = exp.model
    plane, k, nmaps = tuple(model.input_shape[1:]), nclasses(model), model.layers[-1].out_shape[0]

    def open_writer():                      # rank 0: refuses to replace a mask before any work
        n = pictures.source(exp.dataset.image_shape).shape[0]
        names = mask_names(pictures.names if pictures.pictures is not None else None, n)
        for name in names:
            refuse_existing(os.path.join(output, name), "mask", force, "give another -o, or --force to replace it")
        os.makedirs(output, exist_ok=True)
        colors = class_colors(exp.dataset.path) if getattr(exp.dataset, "path", None) else None
        return MaskWriter(output, names, plane, k, nmaps, record.get("class_names"), colors, probabilities)
    writer = job.collectively(lambda: open_writer() if job.rank0 else None)
    with writer if writer is not None else contextlib.nullcontext():
        receive = BandAssembler(plane, mask_grid(exp), writer.band, writer.tile).receive if writer else None
        predict_masks(exp, images, receive, probabilities is not None)
    if writer is None:
        return []
    n, (h, w) = len(writer.names), plane
    lines = [f"{output}: {writer.written} masks of {h}x{w} pixels, {k} classes"]
    if probabilities is not None:
        lines.append(f"{probabilities}: probabilities ({n}, {nmaps}, {h}, {w}) float32, labels ({n}, {h}, {w})")
    return lines
