"""Write a small segmentation data set to try `distnet data convert --masks` without your own:

    python experiments/make_segmentation_demo.py seg_demo      # seg_demo/images/*.png, seg_demo/masks/*.png
    distnet data convert seg_demo/images datasets/segmentation_demo.h5 --masks seg_demo/masks \
        --classes seg_demo/classes.txt

48 RGB images of 37x53 pixels (sizes that are not powers of two, so tiles are uneven on most
grids) with a mask each, a palette PNG of the same name: class 0 ``background`` (noise), 1
``disc``, 2 ``square`` and 3 ``bar`` (a few of each at random places, the later drawn over the
earlier), and a one-pixel border of the ignore label 255 around every square (a "don't care"
outline, as Pascal VOC draws one). ``classes.txt`` names the classes. Needs Pillow
(``pip install 'distnet[images]'``). Seeded: the same files every time.
"""
import os
import sys

import numpy as np

CLASSES = ("background", "disc", "square", "bar")
#: The palette of the masks: one colour per class, white for the ignore label (255).
COLORS = {0: (0, 0, 0), 1: (220, 60, 60), 2: (60, 180, 75), 3: (70, 110, 230), 255: (255, 255, 255)}


def _shapes(rng, H, W):
    """The image ``(H, W, 3)`` and its mask ``(H, W)`` of one sample."""
    image = rng.randint(0, 70, (H, W, 3)).astype(np.int32)
    mask = np.zeros((H, W), np.uint8)
    yy, xx = np.mgrid[:H, :W]
    for _ in range(rng.randint(2, 5)):
        kind = rng.randint(1, 4)
        y, x, r = rng.randint(0, H), rng.randint(0, W), rng.randint(3, 8)
        if kind == 1:
            inside = (yy - y) ** 2 + (xx - x) ** 2 <= r * r
        elif kind == 2:
            inside = (abs(yy - y) <= r) & (abs(xx - x) <= r)
            mask[(abs(yy - y) <= r + 1) & (abs(xx - x) <= r + 1) & ~inside] = 255
        else:
            inside = (abs(yy - y) <= 1) & (abs(xx - x) <= 3 * r)
        mask[inside] = kind
        image[inside] += np.asarray(COLORS[kind]) // 2 + rng.randint(20, 60)
    return np.clip(image, 0, 255).astype(np.uint8), mask


def make_segmentation_demo(folder, count=48, size=(37, 53), seed=0):
    """Write the images, masks and classes.txt under ``folder``; returns the number of images."""
    from PIL import Image
    rng = np.random.RandomState(seed)
    palette = [v for k in range(256) for v in COLORS.get(k, (0, 0, 0))]
    for sub in ("images", "masks"):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    for i in range(count):
        image, mask = _shapes(rng, *size)
        Image.fromarray(image).save(os.path.join(folder, "images", f"{i:03d}.png"))
        m = Image.fromarray(mask, "L").convert("P")
        m.putpalette(palette)
        m.save(os.path.join(folder, "masks", f"{i:03d}.png"))
    with open(os.path.join(folder, "classes.txt"), "w") as f:
        f.write("\n".join(CLASSES) + "\n")
    return count


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "seg_demo"
    print(f"wrote {make_segmentation_demo(out)} images and masks under {out}/images, {out}/masks")
