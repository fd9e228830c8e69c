"""What a finished run measured about its own cost: ``perf.json`` in the job folder.

Written by the training runtime (``gputrain.train.runtime``) when a run closes, read by the planner's
calibration (``gputrain.registry.measured``, ``gputrain.planner.calibrate``) and by summaries. Step time is
the median over logged steps (evaluation and checkpoint pauses fall outside a median) in the steady state:
warm-up steps (the process's first, and every step in which torch's compiler ran, ``compile_seconds``) are
left out; their wall time (``warmup_seconds``) and the compiler's share of it (``compile_seconds``) are
reported on their own, as start-up (#27). Peak memory is the largest over the ranks:
CUDA max allocated on GPUs, the resident set on CPU.
"""

from __future__ import annotations

import itertools
import statistics
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

PERF_FILE = "perf.json"
PERF_VERSION = 1
#: per-step phase timings a training may log, by the name it logs them under
PHASE_KEYS = {"rollout_seconds": "rollout", "weight_sync_seconds": "sync", "reward_seconds": "reward"}


class MeasuredPerf(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = PERF_VERSION
    step_seconds: float | None = Field(default=None, description="median seconds per step")
    steps_timed: int = Field(default=0, description="steps the median is over")
    warmup_steps: int = Field(default=0, description="logged steps left out of the median as warm-up (#27)")
    compile_seconds: float | None = Field(default=None, description="torch's compiler, summed over the run "
                                          "(start-up: not in step_seconds)")
    warmup_seconds: float | None = Field(default=None, description="wall time of the warm-up steps (the "
                                         "first, and those that compiled; compile_seconds is the compiler's share "
                                         "of it): start-up, not in step_seconds (#27); None where no step time "
                                         "was logged per step")
    phases: dict[str, float] = Field(default_factory=dict, description="median seconds per step by phase")
    tokens_per_s: float | None = None
    peak_memory_gib: float | None = Field(default=None, description="largest over ranks")
    peak_memory_kind: Literal["cuda_max_allocated", "rss", "none"] = "none"
    wall_seconds: float | None = Field(default=None, description="set-up to close, whole run")
    cpu_seconds: float | None = Field(default=None, description="user + system CPU time, summed over the ranks "
                                      "and the processes they waited for (data workers, sandbox)")
    host_rss_gib: float | None = Field(default=None, description="peak resident memory summed over the ranks "
                                       "(an upper bound of the host memory the job held at once)")
    world_size: int = 1
    device: str = ""


def steady_steps(logged: list[float], compiled: list[bool]) -> tuple[list[float], int]:
    """(the steps that count for the steady-state step time, how many were left out as warm-up).

    Left out: the first logged step of the process when more than two were logged (allocator, CUDA context
    and generate warm-up: the H100's padded GRPO job took 32.4 s for its first step, 8.5 s later) and every
    step in which torch's compiler ran (``compiled``: FlexAttention's first compile, 46.1 s, and a recompile
    for a new shape, 22.0 s, against 8.6 s steady). Where that leaves nothing, the steps that did not compile,
    else all of them: a figure marked by ``warmup_steps`` rather than none."""
    warm = ({0} if len(logged) > 2 else set()) | {i for i, c in enumerate(compiled) if c}
    steady = [s for i, s in enumerate(logged) if i not in warm]
    if not steady:
        steady = [s for s, c in zip(logged, compiled, strict=False) if not c] or list(logged)
    return steady, len(logged) - len(steady)


def median_step_seconds(stamps: list[tuple[int, float]], logged: list[float]) -> tuple[float | None, int]:
    """Median step time: the training's own ``step_seconds`` when it logs one, else the time between
    consecutive metric records divided by the steps between them (the first interval, warm-up, dropped)."""
    if logged:
        return statistics.median(logged), len(logged)
    rates = []
    for (s0, t0), (s1, t1) in itertools.pairwise(stamps):
        if s1 > s0 and t1 >= t0:
            rates.append((t1 - t0) / (s1 - s0))
    rates = rates[1:] if len(rates) > 2 else rates
    return (statistics.median(rates), len(rates)) if rates else (None, 0)
