"""``algorithm:`` settings of the selftest entrypoint."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SelftestAlgorithm(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sizes_mib: list[float] = Field(default=[1.0, 8.0, 32.0], description="all-reduce sizes for bandwidth")
    iterations: int = Field(default=5, gt=0, description="timed all-reduces per size")
    fail: bool = Field(default=False, description="raise after the checks (to test failure handling)")
    sleep_seconds: float = Field(default=0.0, ge=0, description="idle time, to test cancel and preemption")
    checkpoint_mib: float = Field(default=0.0, ge=0, le=65536, description="extra MiB each rank checkpoints "
                                  "(random, checked on resume): a save that takes seconds, to test preemption")
