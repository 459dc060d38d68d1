"""Decoding image files into pixels with Pillow (``pip install 'distnet[images]'``), as ``distnet
data convert`` decodes a folder's images and ``distnet predict`` repeats it on new pictures.

An image is taken as it is shown: its EXIF orientation applied (phone photos), its first frame
(animated GIF, multi-page TIFF: a note names them). Images are grayscale (1 channel) when all
are, else RGB (3 channels; alpha is dropped); 16-bit grayscale becomes 8 bits (``round(v /
257)``), and floating-point images (TIFF mode ``F``) are refused. All images must have one size
unless ``size`` (``HxW``) resizes them (bilinear), an image of another aspect ratio by
``resize``: ``stretch`` (the default), ``crop`` or ``pad`` (:func:`fit_image`). How images were
decoded is kept as the recipe (:mod:`.recipe`).
"""
import numpy as np

from ..errors import DataError, OptionError
from .report import shown


def parse_size(text):
    """``"HxW"`` (or ``"N"`` for a square) -> ``(H, W)``; DataError otherwise."""
    if text is None:
        return None
    parts = str(text).lower().replace(" ", "").split("x")
    try:
        vals = [int(p) for p in parts]
    except ValueError:
        vals = []
    if len(vals) == 1:
        vals = vals * 2
    if len(vals) != 2 or min(vals) < 1:
        raise OptionError(f"size must be HxW (e.g. 64x48), got {text!r}")
    return tuple(vals)


def pillow():
    try:
        from PIL import Image
    except ImportError:
        raise DataError("reading images needs Pillow, which is not installed: pip install "
                        "'distnet[images]' (or pip install Pillow)") from None
    return Image


#: EXIF orientations (tag 274) that turn the stored image by 90 degrees (H and W swap).
_QUARTER_TURNS = (5, 6, 7, 8)


_ORIENTATION = 0x0112


def probe(Image, path):
    """``(mode, (H, W), frames)`` of an image as it is shown (its EXIF orientation applied),
    reading its header only."""
    try:
        with Image.open(path) as im:
            hw = (im.height, im.width)
            if im.getexif().get(_ORIENTATION) in _QUARTER_TURNS:
                hw = hw[::-1]
            return im.mode, hw, int(getattr(im, "n_frames", 1))
    except Exception as e:  # noqa: BLE001 - PIL raises many types for bad files
        raise DataError(f"cannot read image {path}: {type(e).__name__}: {e}") from None


#: Pillow modes of one channel (``LA``: grayscale with alpha, the alpha dropped).
GRAY_MODES = {"1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"}


def to_8_bits(Image, im, wide=None):
    """``im`` as an 8-bit image: 16-bit grayscale (modes ``I;16*``, and ``I`` holding 0..65535)
    becomes ``round(v / 257)`` (Pillow's own conversion clips every value above 255 to 255);
    floating-point pixels (mode ``F``) have no fixed range and are refused. ``wide``: a list
    that gets the largest value of each 16-bit image."""
    if im.mode == "F":
        raise ValueError("floating-point pixels (mode F) have no fixed range to map to 0..255: save "
                         "the images as an (N, C, H, W) .npy and convert that")
    if im.mode != "I" and not im.mode.startswith("I;16"):
        return im
    a = np.asarray(im).astype(np.int64)
    if a.size and (a.min() < 0 or a.max() > 65535):
        raise ValueError(f"{im.mode} pixels {a.min()}..{a.max()} are not 16-bit (0..65535)")
    if wide is not None and a.size:
        wide.append(int(a.max()))
    return Image.fromarray(((a * 255 + 32767) // 65535).astype(np.uint8), "L")


#: How ``--size`` meets an image of another aspect ratio: ``stretch`` (both axes scaled on their
#: own: the default, distorting), ``crop`` (scaled to cover H x W, the middle kept), ``pad``
#: (scaled to fit inside H x W, centered on black: a letterbox).
RESIZE_MODES = ("stretch", "crop", "pad")


def fit_image(Image, im, size, resize="stretch", nearest=False, fill=0):
    """``im`` (a Pillow image) brought to ``size`` ``(H, W)`` by ``resize``
    (:data:`RESIZE_MODES`), bilinear (``nearest``: nearest, for masks; ``pad`` pads with
    ``fill``); an image of that size already is returned as it is."""
    H, W = size
    h, w = im.height, im.width
    how = Image.NEAREST if nearest else Image.BILINEAR
    if (h, w) == (H, W):
        return im
    if resize == "stretch":
        return im.resize((W, H), how)
    if resize == "crop":            # the box is in source pixels, fractions kept: no rounding shift
        s = max(H / h, W / w)
        ch, cw = H / s, W / s
        top, left = (h - ch) / 2, (w - cw) / 2
        return im.resize((W, H), how, box=(left, top, left + cw, top + ch))
    if resize == "pad":
        s = min(H / h, W / w)
        nh, nw = max(1, min(H, int(round(h * s)))), max(1, min(W, int(round(w * s))))
        inner = im if (nh, nw) == (h, w) else im.resize((nw, nh), how)
        canvas = Image.new(im.mode, (W, H), fill)
        canvas.paste(inner, ((W - nw) // 2, (H - nh) // 2))
        return canvas
    raise OptionError(f"resize must be one of {', '.join(RESIZE_MODES)}, got {resize!r}")


def decode_image(Image, path, channels, size, wide=None, resize="stretch"):
    """``(C, H, W)`` uint8 pixels of one image as it is shown: the first frame, turned by its
    EXIF orientation (phone photos), 16-bit images scaled to 8 bits (``wide``:
    :func:`to_8_bits`), brought to ``size`` by ``resize`` (:func:`fit_image`)."""
    from PIL import ImageOps
    try:
        with Image.open(path) as im:
            im = ImageOps.exif_transpose(im)
            im = to_8_bits(Image, im, wide).convert("L" if channels == 1 else "RGB")
            if size is not None:
                im = fit_image(Image, im, size, resize)
            a = np.asarray(im, dtype=np.uint8)
    except Exception as e:  # noqa: BLE001
        raise DataError(f"cannot read image {path}: {type(e).__name__}: {e}") from None
    return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)


def survey(Image, paths, size):
    """Read the headers of ``paths``: ``(channels, (H, W), [(h, w) of every image], notes)``;
    one DataError naming every image that cannot be read, or images of several sizes without
    ``size``."""
    notes = []
    shapes, sizes, frames, gray, color, bad = [], {}, [], [], [], []
    for path in paths:
        try:
            mode, hw, n_frames = probe(Image, path)
        except DataError as e:      # all of them in one message, not one per attempt
            bad.append((path, str(e)))
            continue
        shapes.append(hw)
        (gray if mode in GRAY_MODES else color).append(path)
        sizes.setdefault(hw, path)
        if n_frames > 1:
            frames.append(f"{path} ({n_frames} frames)")
    bad.sort()
    if len(bad) == 1:
        raise DataError(bad[0][1])
    if bad:
        raise DataError(f"{len(bad)} images cannot be read (remove or replace them): {bad[0][1]}; and "
                        f"{shown([p for p, _ in bad[1:]], 5)}")
    if frames:
        notes.append(f"{len(frames)} image(s) hold several frames (animated GIF, multi-page TIFF); only "
                     f"the first frame of each is converted: {shown(sorted(frames))}")
    if gray and color:      # one stray color image makes a grayscale set 3 channels
        few, many = sorted((gray, color), key=len)
        kinds = ("grayscale", "color") if few is gray else ("color", "grayscale")
        notes.append(f"{len(few)} {kinds[0]} image(s) among {len(many)} {kinds[1]} ones: every image is "
                     f"stored as RGB (3 channels; a gray value in all three): {shown(sorted(few))}")
    if size is None and len(sizes) > 1:
        (s1, p1), (s2, p2) = list(sizes.items())[:2]
        raise DataError(f"images of different sizes: {p1} is {s1[0]}x{s1[1]}, {p2} is {s2[0]}x{s2[1]}; "
                        "give a size to resize them all (--size HxW)")
    return 3 if color else 1, size or next(iter(sizes)), shapes, notes
