"""Recipe × hardware → :class:`~gputrain.contract.plan.JobPlan` (resolved config, estimates). Pure: no
files written, no jobs run."""

from gputrain.contract.plan import JobPlan
from gputrain.planner.resolve import make_plan

__all__ = ["JobPlan", "make_plan"]
