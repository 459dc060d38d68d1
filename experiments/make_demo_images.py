"""Write a small folder of PNG images to try `distnet data convert` without your own data:

    python experiments/make_demo_images.py my_images        # my_images/<class>/<i>.png
    python experiments/make_demo_images.py new_pics 2 7     # 2 per class, seed 7: new pictures

Three classes of 40 RGB images, 40x48 pixels, on a noisy background: ``bars`` (horizontal
stripes), ``columns`` (vertical stripes) and ``spot`` (a bright square at a random place).
Needs Pillow (``pip install 'distnet[images]'``). Seeded: the same files every time.
"""
import os
import sys

import numpy as np


def make_demo_images(folder, per_class=40, size=(40, 48), seed=0):
    """Write the images; returns the number written."""
    from PIL import Image
    rng = np.random.RandomState(seed)
    H, W = size
    count = 0
    for name in ("bars", "columns", "spot"):
        os.makedirs(os.path.join(folder, name), exist_ok=True)
        for i in range(per_class):
            a = rng.randint(0, 90, (H, W, 3)).astype(np.int32)
            color = rng.randint(60, 160, 3)
            if name == "bars":
                a[rng.randint(0, 4)::4] += color
            elif name == "columns":
                a[:, rng.randint(0, 4)::4] += color
            else:
                y, x = rng.randint(0, H - 12), rng.randint(0, W - 12)
                a[y:y + 12, x:x + 12] += color
            Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(
                os.path.join(folder, name, f"{i:03d}.png"))
            count += 1
    return count


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "my_images"
    per_class, seed = (int(a) for a in (sys.argv[2:4] + ["40", "0"][len(sys.argv[2:4]):]))   # [PER_CLASS [SEED]]
    print(f"wrote {make_demo_images(out, per_class, seed=seed)} images under {out}/")
