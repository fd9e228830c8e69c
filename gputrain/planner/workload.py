"""What every step-time model shares: the :class:`Hardware` a step runs on, the :class:`StepModel` it returns,
run-level constants and the global-batch formula.

The models themselves live one family per module (``workload_rl``, ``workload_dense``) and import this one;
``gputrain.planner.step_time`` picks the family for an entrypoint. This module imports neither, so the three
form no circle (an import-linter contract in ``pyproject.toml`` keeps it so).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gputrain.contract.hardware import GPUFacts
from gputrain.planner import physics
from gputrain.recipe.schema import Recipe


@dataclass(frozen=True)
class Hardware:
    """What a step runs on: GPU type, ranks, the precision resolved for that GPU."""

    gpu: GPUFacts
    world: int
    precision: str
    gpus_per_node: int = 0  # 0: all `world` GPUs in one node

    @property
    def link_domain(self) -> int:
        """GPUs joined by one NVLink fabric: the node's, or the rack's where the catalog says so (GB200 NVL72)."""
        return max(self.gpu.nvlink_domain, self.gpus_per_node or self.world)

    @property
    def peak(self) -> float:
        return physics.peak_flops_per_rank(self.gpu, self.precision, self.world)

    @property
    def bandwidth(self) -> float:
        return physics.bandwidth_per_rank(self.gpu, self.world)

    @property
    def op_seconds(self) -> float:
        return physics.op_seconds(self.gpu)


#: process start, imports, weights loaded, device and process-group initialisation, seconds
STARTUP_SECONDS = {"gpu": 60.0, "cpu": 8.0}
#: write rate of a checkpoint to the job folder (torch.save + fsync on a node's disk), bytes/s
CHECKPOINT_BYTES_PER_S = 1e9


def startup_seconds(hw: Hardware) -> float:
    return STARTUP_SECONDS["cpu" if hw.gpu.is_cpu else "gpu"]


@dataclass
class StepModel:
    workload: str
    phases: dict[str, float] = field(default_factory=dict)
    flops: float = 0.0
    overhead_seconds: float = 0.0
    assumptions: list[str] = field(default_factory=list)
    compute_seconds: float = 0.0          # the part of the step that scales with the compute efficiency
    concurrent: tuple[str, ...] = ()      # phases that overlap the others (one-step off-policy rollout)
    efficiency: float | None = None       # the compute efficiency the step was priced at, where the workload chose it

    @property
    def step_seconds(self) -> float:
        if not self.concurrent:
            return sum(self.phases.values())
        beside = sum(v for k, v in self.phases.items() if k in self.concurrent)
        rest = sum(v for k, v in self.phases.items() if k not in self.concurrent and k != "sync")
        return self.phases.get("sync", 0.0) + max(beside, rest)


def global_batch(recipe: Recipe, world: int) -> int:
    """Samples per optimizer step, whole job: the one home of this formula (the plan stores its value)."""
    return recipe.train.batch_size * world * recipe.train.grad_accum
