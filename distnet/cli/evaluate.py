"""``distnet evaluate`` and ``distnet predict``: a checkpoint's error rates and predictions, on
one process or under mpiexec on any grid (the work is in :mod:`distnet.experiments.evaluate`)."""
import click

from .job import Job
from .options import checkpoint_argument

_CHECKPOINT = click.option("--checkpoint", "checkpoint", required=True, type=click.Path(),
                           callback=checkpoint_argument, metavar="CK.h5",
                           help="A checkpoint written by distnet run (any grid), or a run directory.")
_SET = click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help="As for run.")


def _load(job, experiment, overrides):
    """EXPERIMENT loaded (with ``--set``) from rank 0's file on every rank, and checked."""
    exp = job.load_experiment(experiment, overrides)
    exp.check()
    return exp


@click.command("evaluate")
@click.argument("experiment", type=click.Path(dir_okay=False))
@_CHECKPOINT
@_SET
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead (every metric, the "
              "confusion matrices whole).")
def evaluate(experiment, checkpoint, overrides, as_json):
    """Print the misclassification rates of EXPERIMENT's data splits (train, test) with the
    weights of a checkpoint, with their cost, top-k error rate, accuracy per class and confusion
    matrix (a Seq2SeqExperiment: token and whole-sequence accuracies). Under mpiexec the
    experiment's grid is used, whatever grid wrote the checkpoint."""
    from ..experiments.evaluate import evaluate_checkpoint, evaluation_lines
    from ..experiments.seq2seq import Seq2SeqExperiment
    with Job(world=True) as job:   # under mpiexec the abort hook first (as for run)
        exp = _load(job, experiment, overrides)
        if isinstance(exp, Seq2SeqExperiment):   # accuracies of greedy decoding, not error rates
            ck, accuracies = exp.evaluate_checkpoint(checkpoint)
        else:
            result = evaluate_checkpoint(exp, checkpoint)
    if isinstance(exp, Seq2SeqExperiment):
        if job.rank0:
            t = exp.topology
            click.echo(f"{checkpoint}: epoch {ck.epoch} (written on {ck.meta.get('size', '?')} rank(s)), "
                       f"evaluated on {t.size} rank(s)")
            for split, (tok, seq, n) in accuracies.items():
                click.echo(f"{split} set: token accuracy {tok:.2f}%, sequence accuracy {seq:.2f}% "
                           f"({n} sequences, greedy decoding)")
        return
    if job.rank0 and as_json:
        import json
        click.echo(json.dumps({"checkpoint": checkpoint, "epoch": result.epoch, "written_on": result.written_on,
                               "evaluated_on": result.evaluated_on, "class_names": result.class_names,
                               "splits": {s: dict(images=result.counts[s], **m) for s, m in result.metrics.items()}}))
    elif job.rank0:
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
                   "(or test/x), a .npy file or an IDX file (MNIST's t10k-images-idx3-ubyte).")
@click.option("--recipe", "recipe_file", type=click.Path(exists=True, dir_okay=False), metavar="DATA.h5",
              help="Pictures: decode them by the recipe kept in DATA.h5 (a data set distnet data convert made "
                   "from an image folder); default: the experiment's data set.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), metavar="OUT",
              help="Where to write: OUT.h5 / OUT.hdf5 (datasets probabilities, labels) or OUT.csv "
                   "(label,p0,...,pK-1 per image).")
@_SET
@click.option("--force", is_flag=True, help="Replace OUT if it exists (never --data, the checkpoint or "
              "the experiment).")
def predict(experiment, checkpoint, data_paths, recipe_file, output, overrides, force):
    """Write the outputs of the model's last layer (class probabilities after a softmax or
    logistic activation, raw scores after an identity one) and the predicted labels of
    the images in FILE, with the weights of a checkpoint; one row per image, in order.
    Pictures (image files, folders) are decoded and resized as distnet data convert did for
    the training images (the recipe kept in the experiment's data set, or --recipe), and get
    the columns file and, in a folder per class, true_label and true_class."""
    from ..convert.pictures import Pictures
    from ..data.predict_files import prediction_format, write_predictions
    from ..datasets.files import FileDataset
    from ..errors import ConfigError
    from ..experiments.evaluate import predict_checkpoint
    from ..experiments.seq2seq import Seq2SeqExperiment
    from ..fileio import OutputError, check_writable, refuse_existing, same_file, write_failure
    def unwritable(e):                      # an OSError (a full disk): told as one of OUT, exit status 1
        return f"-o {output}: {write_failure(e)}", 1

    with Job(errors=[(OSError, unwritable)]) as job:
        prediction_format(output)           # a wrong extension fails before any work
        job.start_world()                   # under mpiexec the abort hook first (as for run)
        exp = _load(job, experiment, overrides)

        def check_output():                 # rank 0 writes OUT
            for p in (*data_paths, checkpoint, experiment):
                if same_file(output, p):    # even with --force
                    raise OutputError(f"-o {output} is also an input ({p}); give another -o")
            refuse_existing(output, "output", force, "give another -o, or --force to replace it")
            check_writable(output, "predictions")
        job.collectively(lambda: check_output() if job.rank0 else None)   # a refusal: every rank says it
        if isinstance(exp, Seq2SeqExperiment):
            raise ConfigError(f"{experiment}: distnet predict writes class probabilities of images; a "
                              "Seq2SeqExperiment has none (distnet evaluate gives its accuracies)")
        shape = exp.dataset.image_shape
        reading = exp.dataset.reading       # read: root / node: only the reader opens --data
        data_file = exp.dataset.path if isinstance(exp.dataset, FileDataset) else None  # its recipe decodes pictures

        def inputs():                       # a missing recipe is told by every rank
            if not reading.is_reader:
                return None
            found = Pictures(data_paths, recipe_file)
            found.use_recipe(data_file, shape)
            return found
        pictures = job.collectively(inputs)

        def images(tile):
            return reading.read_images(lambda: pictures.source(shape), ", ".join(data_paths), tile)
        outputs, labels = predict_checkpoint(exp, checkpoint, images)

        def write():                        # rank 0; a failure (a full disk): every rank says it
            try:
                write_predictions(output, outputs, labels, exp.dataset.class_names(), pictures.names,
                                  pictures.truth)
            except (OSError, RuntimeError) as e:   # h5py raises RuntimeError too for a failed write
                raise OutputError(f"-o {output}: {write_failure(e)}") from None
        job.collectively(lambda: write() if job.rank0 else None)
    if job.rank0:
        click.echo(f"{output}: {len(labels)} images, {outputs.shape[1]} classes")
