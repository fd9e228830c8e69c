"""What a plan predicts: memory per GPU (every term), step time, total time and cost.

The planner fills it (``gputrain.planner.estimate``); ``plan`` prints it, summaries read the hourly rate
and the planned steps from it. To add a figure (a time split, a calibration source), add a field with a
default here and bump ``gputrain.contract.plan.SCHEMA_VERSION``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Estimate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    params: float | None = Field(default=None, description="parameter count the estimate assumed")
    memory_gib_per_gpu: float | None = Field(default=None, description="sum of memory_breakdown")
    memory_breakdown: dict[str, float] = Field(default_factory=dict, description="GiB per GPU, by term")
    capacity_gib: float = Field(default=0.0, description="memory of one GPU of the planned type")
    step_seconds: float | None = None
    total_steps: int | None = None
    total_hours: float | None = None
    cost_usd: float | None = None
    gpu_hourly_usd: float = 0.0
    mfu: float = Field(default=0.35, description="model FLOPs utilisation assumed for step_seconds")
    fits: bool = True
    fit_message: str = Field(default="", description="why it does not fit, and what to change")
    warnings: list[str] = Field(default_factory=list)
