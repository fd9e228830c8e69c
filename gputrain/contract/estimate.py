"""What a plan predicts: memory per GPU (every term), step time split by phase, total time and cost.

The planner fills it (``gputrain.planner.estimate``); ``plan`` prints it, summaries read the hourly rate
and the planned steps from it, and the failure doctor reads :class:`MemoryTerm` (name, GiB, the knob that
cuts it) and :class:`FitSuggestion` to propose remedies. To add a figure, add a field with a default here
and bump ``gputrain.contract.plan.SCHEMA_VERSION``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class MemoryTerm(BaseModel):
    """One term of the per-GPU memory model, machine-readable for remedies."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="e.g. logits, activations, optimizer, vllm_share")
    gib: float = Field(ge=0, description="GiB per GPU")
    knob: str = Field(default="", description="the recipe field (or flag) that cuts it; empty: fixed")
    scales_with_batch: bool = Field(default=False, description="linear in train.batch_size")
    phase: Literal["persistent", "train", "rollout"] = Field(
        default="persistent", description="persistent terms add up; the peak adds the larger of train/rollout"
    )
    note: str = Field(default="", description="how the term was computed")
    basis: Literal["exact", "measured", "assumed"] = Field(
        default="assumed", description="exact: a byte count (parameters, a configured reservation); measured: "
        "a formula checked against a measurement; assumed: a formula not yet checked (wide range)")


class FitSuggestion(BaseModel):
    """The largest per-GPU micro-batch (and vLLM share) whose *upper* memory bound fits with ``margin`` of the
    device left free; the global batch stays the recipe's (gradient accumulation makes up the rest)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    batch_size: int | None = Field(default=None, description="largest train.batch_size that fits (None: none)")
    grad_accum: int | None = Field(default=None, description="accumulation that keeps the global batch")
    memory_gib: tuple[float, float] | None = Field(default=None, description="predicted range at that batch")
    confidence: Literal["measured", "assumed"] = Field(
        default="assumed", description="measured: every term that grows with the batch was checked against a "
        "measurement (or calibrated by one); assumed: the upper bound carries the assumed terms' wide range")
    vllm_gpu_memory_utilization: float | None = Field(default=None, description="vLLM share that fits")
    margin: float = Field(default=0.1, description="share of device memory kept free")
    overrides: list[str] = Field(default_factory=list, description="--set lines that apply it (plan --fit)")
    note: str = ""


class Calibration(BaseModel):
    """What a measured run taught the estimate (``gputrain plan`` shows predicted vs measured)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    match: Literal["exact", "near"] = Field(description="exact: same cost fingerprint; near: same entrypoint "
                                            "and GPU type, other settings")
    job: str = Field(description="the job learned from (backend:job id)")
    job_dir: str = ""
    distance: float = Field(default=0.0, description="how far the run's cost inputs are from this plan's")
    measured_step_seconds: float | None = None
    model_step_seconds: float | None = Field(default=None, description="the model's prediction for that run")
    factor: float = Field(default=1.0, description="measured / model, applied to this plan's step time")
    measured_peak_gib: float | None = Field(default=None, description="peak memory measured (CUDA or RSS)")
    predicted_step_seconds: float | None = Field(default=None, description="this plan before calibration")
    predicted_memory_gib: float | None = Field(default=None, description="this plan's memory before calibration")


class GuideComparison(BaseModel):
    """The recipe's guide figures for the planned hardware next to the plan's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    guide_step_seconds: float | None = None
    guide_total_hours: float | None = None
    guide_memory_gib: float | None = None
    step_ratio: float | None = Field(default=None, description="plan / guide")
    memory_ratio: float | None = None
    differs: str = Field(default="", description="why the recipe as written is a different job (recipe text)")


class Estimate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    params: float | None = Field(default=None, description="parameter count the estimate assumed")
    workload: str = Field(default="supervised", description="which workload model: rl, diffusion, gnn, ...")
    memory_gib_per_gpu: float | None = Field(default=None, description="sum of memory_terms")
    memory_breakdown: dict[str, float] = Field(default_factory=dict, description="GiB per GPU, by term")
    memory_terms: list[MemoryTerm] = Field(default_factory=list, description="every term with its knob")
    memory_range_gib: tuple[float, float] | None = Field(
        default=None, description="low and high bound of the peak: each term's range by its basis")
    capacity_gib: float = Field(default=0.0, description="memory of one GPU of the planned type")
    step_seconds: float | None = Field(default=None, description="one optimizer step (RL: one rollout step)")
    phases: dict[str, float] = Field(default_factory=dict, description="seconds per step by phase")
    step_flops: float | None = Field(default=None, description="FLOPs of one step, whole job")
    peak_bound_seconds: float | None = Field(default=None, description="step_flops at the GPUs' dense peak")
    overhead_seconds: float = Field(default=0.0, description="start-up, evaluation and report, whole run")
    total_steps: int | None = None
    total_hours: float | None = None
    cost_usd: float | None = None
    gpu_hourly_usd: float = 0.0
    mfu: float = Field(default=0.35, description="model FLOPs utilisation assumed for the compute phases")
    step_range_seconds: tuple[float, float] | None = Field(
        default=None, description="low and high bound of the step: the compute efficiency's range")
    assumptions: list[str] = Field(default_factory=list, description="what the workload model assumed")
    fits: bool = True
    fit_message: str = Field(default="", description="why it does not fit, and what to change")
    fit: FitSuggestion | None = None
    calibration: Calibration | None = None
    guide: GuideComparison | None = None
    warnings: list[str] = Field(default_factory=list)
