"""Recipe × hardware → :class:`Plan` (resolved config, estimates). Pure: no files written, no jobs run."""

from gputrain.planner.resolve import Plan, make_plan

__all__ = ["Plan", "make_plan"]
