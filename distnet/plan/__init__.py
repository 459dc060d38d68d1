"""A cost model of one training step on N ranks, from the geometry alone (no MPI, no arrays):
the machine (:mod:`.machine`), the collectives' costs (:mod:`.collectives`), the per-layer and
per-rank figures (:mod:`.model`), memory per rank and per node (:mod:`.memory`) and the text
report with its warnings (:mod:`.report`)."""
from .machine import Machine
from .model import LayerPlan, Plan, plan_model
from .report import format_plan

__all__ = ["LayerPlan", "Machine", "Plan", "format_plan", "plan_model"]
