"""What ``distnet data convert`` tells its user: the summary lines it prints (:func:`describe`:
what was written, which class became which label, what ``--size`` did to aspect ratios, how the
splits were drawn) and the notes it prints as warnings (classes missing from a split, labels
without images, 16-bit images with few gray levels).
"""
import numpy as np


#: Class mappings and file names shown in full in a note before "...".
_SHOWN = 3


def shown(items, n=_SHOWN):
    """``a, b, c, ... (N in all)`` for a note."""
    items = list(items)
    more = f", ... ({len(items)} in all)" if len(items) > n else ""
    return ", ".join(str(i) for i in items[:n]) + more


#: 16-bit images whose values all stay below this (12-bit cameras and scanners) lose most of
#: their gray levels in ``v / 257``: a note says so.
_FEW_BITS = 4096


def few_bits_note(wide):
    """The note for 16-bit images (``wide``: their largest values) that use few of 16 bits."""
    if not wide or max(wide) >= _FEW_BITS:
        return None
    top = max(wide)
    return (f"{len(wide)} 16-bit image(s) hold values of at most {top} ({top.bit_length()} bits): 8 bits "
            f"(v / 257) keep {(top * 255 + 32767) // 65535 + 1} gray levels of them; to keep them all, "
            "write the images to an (N, C, H, W) uint16 .npy, convert that, and set scale: "
            f"1/{top} (or the sensor's range)")


def resize_line(size, resize, shapes):
    """What ``--size`` did, for the converter's output: how many of the images (``shapes``:
    their ``(h, w)``) had another aspect ratio than ``size`` and what ``resize`` did to them;
    None without ``size``."""
    if size is None:
        return None
    H, W = size
    other = sum(1 for h, w in shapes if h * W != w * H)
    mode = resize or "stretch"
    how = {"stretch": "stretched to it, distorted (--resize stretch, the default; --resize crop or pad keep "
                      "the aspect ratio)",
           "crop": "scaled to cover it and center-cropped (--resize crop)",
           "pad": "scaled to fit inside it and padded with black (letterbox, --resize pad)"}[mode]
    return (f"resized to {H}x{W} (bilinear): {other} of {len(shapes)} image(s) have another aspect ratio, "
            f"{how}")


#: Labels shown by :func:`label_line` before it shortens the list (``distnet data info`` shows all).
LABELS_SHOWN = 12


def label_line(classes, path, mark="/"):
    """``labels: 0 = cat/, 1 = dog/, ...``: which class folder (``mark`` "/"; class name: "")
    became which label."""
    pairs = [f"{k} = {c}{mark}" for k, c in enumerate(classes)]
    if len(pairs) > LABELS_SHOWN:
        pairs = pairs[:LABELS_SHOWN - 2] + ["...", pairs[-1]]
        return f"labels: {', '.join(pairs)} (all {len(classes)}: distnet data info {path})"
    return f"labels: {', '.join(pairs)}"


def describe(info):
    """What ``distnet data convert`` prints: one line, and a second one with the label of every
    class folder, or class name given (:func:`label_line`)."""
    parts = ", ".join(f"{s} {n}" for s, n in info["splits"].items())
    names = ", ".join(info["classes"][:8]) + (", ..." if len(info["classes"]) > 8 else "")
    kind = "volumes" if len(info["shape"]) == 4 else "images"
    masks = ""
    if info.get("masks"):
        ignore = info.get("ignore_label")
        masks = f" with masks ({info['masks']} per {'voxel' if kind == 'volumes' else 'pixel'}" + (
            f", ignore label {ignore})" if ignore is not None else ")")
    what = "float32 targets per volume" if kind == "volumes" else "float32 targets per image"
    line = (f"wrote {info['path']}: {parts} {kind} of {'x'.join(map(str, info['shape']))} {info['dtype']}{masks}, "
            f"{len(info['classes'])} {what if info.get('targets') else 'classes'} ({names})")
    if info.get("targets"):
        return line
    folders = info.get("class_order") is not None
    lines = [line] + [info[k] for k in ("resize", "split") if info.get(k)]
    if folders or info["classes"] != [str(k) for k in range(len(info["classes"]))]:
        lines.append(label_line(info["classes"], info["path"], "/" if folders else ""))   # else: the labels are the names
    return "\n".join(lines)


def split_line(stratify, drawn):
    """The converter's line on a stratified draw (None otherwise). ``drawn``: the splits drawn."""
    if not stratify or not drawn:
        return None
    return (f"{' and '.join(drawn)} drawn stratified by class (--stratify): each class in proportion; a class "
            "missing from a split is named in a warning")


def missing_classes_note(labels, classes, mark=""):
    """A note naming the classes that a split (``labels``: split -> labels) has no image of, but
    another split has: a split drawn at random may miss a small class, and its error rate then
    says nothing about it."""
    held = {s: np.bincount(y, minlength=len(classes)) > 0 for s, y in labels.items()}
    anywhere = np.logical_or.reduce(list(held.values()))
    parts = [f"{s} has no image of {shown(classes[k] + mark for k in np.flatnonzero(anywhere & ~h))}"
             for s, h in held.items() if (anywhere & ~h).any()]
    return f"{'; '.join(parts)} (see distnet data info)" if parts else None


def unused_labels_note(y, nclasses):
    """A note when labels of ``0 .. nclasses-1`` have no image: ``1 .. K`` (MATLAB's and SVHN's
    1-based labels) make K + 1 classes, label 0 empty, and a model of K outputs is refused."""
    empty = np.flatnonzero(np.bincount(y, minlength=nclasses) == 0)
    if not len(empty):
        return None
    if list(empty) == [0]:
        return (f"label 0 has no image: labels 1 .. {nclasses - 1} look 1-based (MATLAB, SVHN), which makes "
                f"{nclasses} classes; store y - 1 for {nclasses - 1} classes 0 .. {nclasses - 2}")
    return f"label(s) {shown(int(k) for k in empty)} of 0 .. {nclasses - 1} have no image"
