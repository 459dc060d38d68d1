"""distnet: neon-style YAML experiments trained on one process or spatially split across MPI ranks.

The promise: a distributed run gives the same numbers as the single-process run, up to
floating-point summation order. See README.md, and docs/design.md#layers-of-the-code for the
layer map (config -> backend -> geometry -> comm -> two wings, ops -> layers -> models and
data -> datasets, joined by experiments -> convert -> cli).
"""

__version__ = "0.1.0"
