"""Experiment objects (the YAML root)."""
from .fit import FitExperiment, FitPredictErrorExperiment
from .loop import RunResult

__all__ = ["FitExperiment", "FitPredictErrorExperiment", "RunResult"]
