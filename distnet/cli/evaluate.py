"""``distnet evaluate`` and ``distnet predict``: a checkpoint's error rates and predictions, on
one process or under mpiexec on any grid (the work is in :mod:`distnet.experiments.evaluate`)."""
import os

import click

from .job import Job
from .options import trained_checkpoint_argument

_CHECKPOINT = click.option("--checkpoint", "checkpoint", required=True, type=click.Path(),
                           callback=trained_checkpoint_argument, metavar="CK.h5|RUN_DIR[:best|:last]",
                           help="A checkpoint written by distnet run (any grid), or a run directory: its best "
                                "checkpoint where the run kept one (checkpoint keep_best), else its last; "
                                "RUN_DIR:best or RUN_DIR:last chooses.")
_SET = click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help="As for run.")
_PREPROCESSING = click.option(
    "--preprocessing", type=click.Choice(["check", "training", "experiment"]), default="check", show_default=True,
    help="The images are scaled as the training's were (the checkpoint keeps its scale, mean, std, normalize "
         "statistics, image shape, class names and picture recipe); an experiment or data file that disagrees "
         "is refused (check), unless told to use the checkpoint's values (training) or the experiment's "
         "(experiment).")


def _load(job, experiment, overrides):
    """EXPERIMENT loaded (with ``--set``) from rank 0's file on every rank, and checked."""
    exp = job.load_experiment(experiment, overrides)
    exp.check()
    return exp


def _chosen():
    """The line that says which checkpoint of a run directory ``--checkpoint`` chose, or None."""
    chosen = click.get_current_context().meta.get("checkpoint choice")
    return chosen.describe() if chosen is not None else None


@click.command("evaluate")
@click.argument("experiment", type=click.Path(dir_okay=False))
@_CHECKPOINT
@_SET
@_PREPROCESSING
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead (every metric, the "
              "confusion matrices whole).")
def evaluate(experiment, checkpoint, overrides, preprocessing, as_json):
    """Print the misclassification rates of EXPERIMENT's data splits (train, test) with the
    weights of a checkpoint, with their cost, top-k error rate, precision, recall and F1 per
    class and confusion matrix by class name (a Seq2SeqExperiment: token and whole-sequence
    accuracies). Under mpiexec the experiment's grid is used, whatever grid wrote the
    checkpoint."""
    from ..experiments.evaluate import evaluate_checkpoint, evaluation_lines
    from ..experiments.seq2seq import Seq2SeqExperiment
    with Job(world=True) as job:   # under mpiexec the abort hook first (as for run)
        exp = _load(job, experiment, overrides)
        if isinstance(exp, Seq2SeqExperiment):   # accuracies of greedy decoding, not error rates
            ck, accuracies = exp.evaluate_checkpoint(checkpoint)
        else:
            result = evaluate_checkpoint(exp, checkpoint, preprocessing=preprocessing)
    if not job.rank0:
        return
    chosen = _chosen()
    if not isinstance(exp, Seq2SeqExperiment) and result.warning:
        click.echo(f"distnet: warning: {result.warning}", err=True)
    if isinstance(exp, Seq2SeqExperiment):
        t = exp.topology
        for line in [chosen] if chosen else []:
            click.echo(line)
        click.echo(f"{checkpoint}: epoch {ck.epoch} (written on {ck.meta.get('size', '?')} rank(s)), "
                   f"evaluated on {t.size} rank(s)")
        for split, (tok, seq, n) in accuracies.items():
            click.echo(f"{split} set: token accuracy {tok:.2f}%, sequence accuracy {seq:.2f}% "
                       f"({n} sequences, greedy decoding)")
    elif as_json:
        import json
        choice = click.get_current_context().meta.get("checkpoint choice")
        click.echo(json.dumps({"checkpoint": checkpoint, "checkpoint_choice": choice.choice if choice else None,
                               "epoch": result.epoch, "written_on": result.written_on,
                               "evaluated_on": result.evaluated_on,
                               ("target_names" if exp.model.cost.regresses else "class_names"): result.class_names,
                               "splits": {s: dict(images=result.counts[s], **m) for s, m in result.metrics.items()}}))
    else:
        for line in [chosen] if chosen else []:
            click.echo(line)
        click.echo(f"{checkpoint}: epoch {result.epoch} (written on {result.written_on}), evaluated on "
                   f"{result.evaluated_on}")
        for line in evaluation_lines(result, exp.model.metric_label):   # Autoencoder: reconstruction
            click.echo(line)


@click.command("predict")
@click.argument("experiment", type=click.Path(dir_okay=False))
@_CHECKPOINT
@click.option("--data", "data_paths", required=True, multiple=True, type=click.Path(), metavar="FILE",
              help="Pictures: image files (PNG, JPEG, ...) and folders of them (a subfolder per class "
                   "gives each picture's true class), repeatable, decoded as distnet data convert decoded "
                   "the training images; or stored images (N, C, H, W): an HDF5 file with a dataset x "
                   "(or test/x), a .npy file or an IDX file (MNIST's t10k-images-idx3-ubyte). A 3-D model: "
                   "volume files (.npy, NIfTI, TIFF stacks) and folders of them, or an HDF5 file of volumes "
                   "(N, C, D, H, W).")
@click.option("--recipe", "recipe_file", type=click.Path(exists=True, dir_okay=False), metavar="DATA.h5",
              help="Pictures: decode them by the recipe kept in DATA.h5 (a data set distnet data convert made "
                   "from an image folder, e.g. with --size where the training images were not resized); "
                   "default: the training's, kept in the checkpoint.")
@click.option("--skip-bad", is_flag=True, help="Pictures that cannot be used (unreadable, another channel "
              "count, another size where the training resized none) are listed in one warning and the others "
              "predicted; without it, the error lists them all.")
@click.option("--convert-channels", is_flag=True, help="Convert pictures of another channel count than the "
              "model's (grayscale to RGB, color to grayscale) and say how many; without it they are refused.")
@click.option("-o", "--output", required=True, type=click.Path(), metavar="OUT",
              help="Where to write: OUT.h5 / OUT.hdf5 (datasets probabilities, labels; class_names) or OUT.csv "
                   "(label, class, then one probability column per class: p_<class name>, in label order); "
                   "a regression (MeanSquared, SumSquared) writes the predicted value of every target instead (HDF5: "
                   "dataset values (N, T); CSV: one column per target, named by the training data's target names); "
                   "for a per-pixel model a folder OUT_DIR/: one mask PNG per image (class indices, "
                   "coloured by the training masks' palette), named as the picture (stored images: "
                   "000000.png, ...); a 3-D model's: one .npy per volume, (D, H, W) uint8.")
@click.option("--probabilities", "probabilities", type=click.Path(dir_okay=False), metavar="OUT.h5",
              help="A per-pixel model: also write its class probabilities (N, K, H, W) float32 and labels "
                   "(N, H, W) to this HDF5 file (volumes: (N, K, D, H, W), (N, D, H, W)).")
@_SET
@_PREPROCESSING
@click.option("--force", is_flag=True, help="Replace OUT if it exists (never --data, the checkpoint or "
              "the experiment).")
def predict(experiment, checkpoint, data_paths, recipe_file, skip_bad, convert_channels, output, probabilities,
            overrides, preprocessing, force):
    """Write the outputs of the model's last layer (class probabilities after a softmax or
    logistic activation, raw scores after an identity one) and the predicted labels of
    the images in FILE, with the weights of a checkpoint; one row per image, in order (a
    regression: the predicted value of every target, no labels).
    Pictures (image files, folders) are decoded and resized as distnet data convert did for
    the training images (the recipe the checkpoint keeps, or --recipe), and get the columns
    file and, in a folder per class, true_label and true_class. The images are scaled as
    the training's were (--preprocessing). A per-pixel model (segmentation) writes a mask
    PNG per image into the folder -o OUT_DIR/ (a 3-D model a .npy per volume; and, with
    --probabilities, its class maps), assembled on rank 0 band by band: no rank holds a whole
    image's maps."""
    from ..data.predict_files import check_prediction_target, prediction_format
    from ..errors import ConfigError, OptionError
    from ..experiments.evaluate import layout_text, restore_trained, written_on
    from ..experiments.predict_masks import check_maskable
    from ..experiments.seq2seq import Seq2SeqExperiment
    from ..fileio import OutputError, check_writable, refuse_existing, same_file, write_failure

    def unwritable(e):                      # an OSError (a full disk): told as one of OUT, exit status 1
        return f"-o {output}: {write_failure(e)}", 1

    with Job(errors=[(OSError, unwritable)]) as job:
        fmt = prediction_format(output)     # a wrong extension fails before any work
        if probabilities is not None and prediction_format(probabilities) != "hdf5":
            raise OptionError(f"--probabilities {probabilities}: give a file ending in .h5 or .hdf5")
        job.start_world()                   # under mpiexec the abort hook first (as for run)
        exp = _load(job, experiment, overrides)

        def check_output():                 # rank 0 writes OUT
            for option, out in (("-o", output), ("--probabilities", probabilities)):
                for p in (*data_paths, checkpoint, experiment) if out is not None else ():
                    if same_file(out, p):   # even with --force
                        raise OutputError(f"{option} {out} is also an input ({p}); give another {option}")
            if fmt == "masks":
                check_writable(os.path.join(output, "mask.png"), "masks")
            else:
                refuse_existing(output, "output", force, "give another -o, or --force to replace it")
                check_writable(output, "predictions")
            if probabilities is not None:
                refuse_existing(probabilities, "output", force, "give another --probabilities, or --force")
                check_writable(probabilities, "probabilities")
        job.collectively(lambda: check_output() if job.rank0 else None)   # a refusal: every rank says it
        if isinstance(exp, Seq2SeqExperiment):
            raise ConfigError(f"{experiment}: distnet predict writes class probabilities of images; a "
                              "Seq2SeqExperiment has none (distnet evaluate gives its accuracies)")
        ck, agreed = restore_trained(exp, checkpoint, preprocessing)
        check_prediction_target(exp.model.per_pixel, output, fmt, probabilities)
        if exp.model.per_pixel:             # pipelines: refused before the data is read
            check_maskable(exp)
        record = agreed.record
        pictures, notes = _pictures(job, exp, record, data_paths, recipe_file, skip_bad, convert_channels)
        notes = ([agreed.warning] if agreed.warning else []) + notes
        reading = exp.dataset.reading       # read: root / node: only the reader opens --data
        shape = exp.dataset.image_shape

        def images(tile):
            return reading.read_images(lambda: pictures.source(shape), ", ".join(data_paths), tile)
        if exp.model.per_pixel:
            from .predict_masks import write_masks
            done = write_masks(job, exp, images, output, probabilities, record, pictures, force)
        else:
            done = _predict_rows(job, exp, images, output, record, pictures)
    if job.rank0:
        t = exp.topology
        for line in notes:
            click.echo(f"distnet: warning: {line}", err=True)
        for line in [_chosen()] if _chosen() else []:
            click.echo(line)
        click.echo(f"{checkpoint}: epoch {ck.epoch} (written on {written_on(ck)}), predicted on "
                   f"{layout_text(t.size, t.grid, t.ndata, t.npipe)}")
        for line in done:
            click.echo(line)


def _pictures(job, exp, record, data_paths, recipe_file, skip_bad, convert_channels):
    """``(Pictures or None, warning lines)``: the --data of the reader ranks (the others: None)
    found and decoded by the training's recipe in ``record`` (or ``--recipe``); a 3-D model's
    volumes (:class:`~distnet.convert.predict_volumes.Volumes`) checked against its shape; a
    refusal is told by every rank."""
    from ..convert.pictures import Pictures
    from ..convert.predict_volumes import Volumes, refuse_volumes
    reading, shape = exp.dataset.reading, exp.dataset.image_shape
    where = ", ".join(record.get("files") or []) or "the training data"

    def inputs():
        if not reading.is_reader:
            return None, []
        if len(shape) == 3:
            refuse_volumes(data_paths)
        found = (Volumes if len(shape) == 4 else Pictures)(data_paths, recipe_file)
        notes = found.decode(record.get("recipe"), where, shape, skip_bad, convert_channels)
        return found, notes
    return job.collectively(inputs)


def _predict_rows(job, exp, images, output, record, pictures):
    """One row per image into OUT, written by rank 0: a classifier's probabilities and labels, or
    a regression's values per target (named by the training data's target names, which the
    checkpoint keeps as its ``class_names``). Returns the lines that say what was written."""
    from ..data.predict_files import write_predictions, write_values
    from ..experiments.evaluate import predict_images, predict_values
    names = record.get("class_names")
    if exp.model.cost.regresses:
        values = predict_values(exp, images)
        job.collectively(lambda: _write(output, write_values, values, names, pictures.names) if job.rank0 else None)
        return [f"{output}: {len(values)} samples, {values.shape[1]} targets"]
    outputs, labels = predict_images(exp, images)
    job.collectively(lambda: _write(output, write_predictions, outputs, labels, names, pictures.names,
                                    pictures.truth) if job.rank0 else None)
    return [f"{output}: {len(labels)} images, {outputs.shape[1]} classes"]


def _write(output, writer, *args):
    """Rank 0 writes the predictions (``writer(output, *args)``); a failure (a full disk) is every
    rank's."""
    from ..fileio import OutputError, write_failure
    try:
        writer(output, *args)
    except (OSError, RuntimeError) as e:   # h5py raises RuntimeError too for a failed write
        raise OutputError(f"-o {output}: {write_failure(e)}") from None
