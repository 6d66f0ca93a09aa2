"""The answer: the monthly benefit's four terms, the verdict (BUY, REUSE, NOT_WORTH_IT, NEED_DATA)
and what would flip it, the sensitivity tornado, one ``plan()`` for the app and the report, and
the published planning presets.

The public names of the group, re-exported; each module says more."""

from __future__ import annotations

from .benefit import Benefit, monthly_benefit
from .plan import PlanResult, plan
from .presets import Preset
from .reasons import Verdict
from .sensitivity import SensitivityRow, sensitivity
from .verdict import Decision, Evaluation, PlanInputs, decide, evaluate

__all__ = [
    "Benefit", "Decision", "Evaluation", "PlanInputs", "PlanResult", "Preset", "SensitivityRow", "Verdict", "decide",
    "evaluate", "monthly_benefit", "plan", "sensitivity"
]
