"""distnet from Python (docs/python.md): load a trained model and predict on new pictures and on
an array of images, with the training's own preprocessing, as `distnet predict` does:

    python experiments/predict_pictures.py RUN_DIR PICTURES...
"""
import sys

import numpy as np

from distnet.api import load

model = load(sys.argv[1])                # a checkpoint, or a run directory: its best checkpoint
print(model)
result = model.predict(sys.argv[2:])     # picture files and folders (a folder per class: the truth)
for name, cls, true, p in zip(result.files, result.classes, result.true_classes, result.probabilities):
    print(f"{name:<16} {cls:<8} true {str(true):<8}", "  ".join(f"{c} {v:.3f}" for c, v in zip(model.class_names, p)))
gray = np.full((2,) + model.image_shape, 128, np.uint8)     # (N, C, H, W) stored as the training images
print(model.predict(gray).classes)
