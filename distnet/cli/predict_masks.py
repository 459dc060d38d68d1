"""``distnet predict`` of a per-pixel model: a mask PNG per image (a ``.npy`` per volume) in ``-o
OUT_DIR/`` and, with ``--probabilities OUT.h5``, the class maps (the work is in
:mod:`distnet.experiments.predict_masks`, the files in :mod:`distnet.data.mask_files`)."""
import contextlib
import os


def write_masks(job, exp, images, output, probabilities, record, pictures, force):
    """Predict and write the masks; returns the lines rank 0 prints. ``images(tile)`` reads
    this rank's tile of the images; ``pictures`` (rank 0: :class:`~distnet.convert.pictures.Pictures`
    or :class:`~distnet.convert.predict_volumes.Volumes`) names them. Collective over the world."""
    from ..data.mask_files import BandAssembler, MaskWriter, class_colors, mask_names
    from ..experiments.predict_masks import mask_grid, nclasses, predict_masks
    from ..fileio import OutputError, refuse_existing, same_file
    from ..geometry.partition import shape_text
    model = exp.model
    plane, k, nmaps = tuple(model.input_shape[1:]), nclasses(model), model.layers[-1].out_shape[0]

    def open_writer():                      # rank 0: refuses to replace a mask before any work
        n = pictures.source(exp.dataset.image_shape).shape[0]
        names = mask_names(pictures.names if pictures.pictures is not None else None, n,
                           ".png" if len(plane) == 2 else ".npy")
        for name in names:
            path = os.path.join(output, name)
            for p, _, _ in pictures.pictures or ():   # a mask named as its input: even with --force
                if same_file(path, p):
                    raise OutputError(f"-o {output}: the mask {name} would replace the input {p}; give another -o")
            refuse_existing(path, "mask", force, "give another -o, or --force to replace it")
        os.makedirs(output, exist_ok=True)
        colors = class_colors(exp.dataset.path) if getattr(exp.dataset, "path", None) else None
        return MaskWriter(output, names, plane, k, nmaps, record.get("class_names"), colors, probabilities)
    writer = job.collectively(lambda: open_writer() if job.rank0 else None)
    with writer if writer is not None else contextlib.nullcontext():
        receive = BandAssembler(plane, mask_grid(exp), writer.band, writer.tile).receive if writer else None
        predict_masks(exp, images, receive, probabilities is not None)
    if writer is None:
        return []
    n, dims = len(writer.names), ", ".join(map(str, plane))
    lines = [f"{output}: {writer.written} masks of {shape_text(plane)} {'pixels' if len(plane) == 2 else 'voxels'}, "
             f"{k} classes"]
    if probabilities is not None:
        lines.append(f"{probabilities}: probabilities ({n}, {nmaps}, {dims}) float32, labels ({n}, {dims})")
    return lines
