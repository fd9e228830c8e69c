"""How long torch's compiler ran during a stretch of training (one step): ``compile_seconds`` (#27).

A compile is paid inside a step (transformers compiles ``flex_attention`` on its first call; dynamo compiles
again when a new shape arrives, its automatic dynamic shapes), so a wall clock around the step cannot tell
compile from work. torch's dynamo keeps process-wide running totals of the seconds it spent compiling,
``torch._dynamo.utils.cumulative_time_spent_ns``: ``entire_frame_compile`` (tracing a frame and the backend
compile of its forward, inductor included) and ``entire_backward_compile`` (AOTAutograd compiles the backward
lazily, at the first backward). torch's own ``calculate_time_spent()`` gives their sum as the compile's
``total_wall_time`` (vLLM reads the same dict to report its compile time). The same totals on CUDA and on
CPU, whatever the backend. The difference of their sum between two reads is the compiler's time in between
(``torch._dynamo.reset()`` clears them: that lap reads 0, never negative). A torch without these counters
(they are private) reads as 0: nothing is marked, the step time stays what it was.
"""

from __future__ import annotations

#: dynamo's running totals (nanoseconds) that together are the time spent compiling
COMPILE_KEYS = ("entire_frame_compile", "entire_backward_compile")


def compiler_seconds() -> float:
    """Seconds torch's compiler has run in this process so far (0 where torch does not count them)."""
    try:
        from torch._dynamo.utils import cumulative_time_spent_ns
    except ImportError:  # pragma: no cover - a torch without dynamo
        return 0.0
    return sum(float(cumulative_time_spent_ns.get(k, 0.0)) for k in COMPILE_KEYS) / 1e9


class CompileClock:
    """``lap()`` returns the compiler's seconds since the previous lap (or since construction)."""

    def __init__(self) -> None:
        self._last = compiler_seconds()
        self.total = 0.0

    def lap(self) -> float:
        now = compiler_seconds()
        spent, self._last = max(0.0, now - self._last), now
        self.total += spent
        return spent
