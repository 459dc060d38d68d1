"""Experiment objects (the YAML root)."""
from .fit import FitExperiment, FitPredictErrorExperiment, RunResult

__all__ = ["FitExperiment", "FitPredictErrorExperiment", "RunResult"]
