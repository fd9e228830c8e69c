"""Preemption: a signal only sets a flag; the training loop stops at a step boundary.

Slurm sends SIGUSR1 before the time limit or on preemption (``--signal=USR1@…`` / ``scancel --signal``),
and SIGTERM comes from ``scancel``, ``docker stop`` or torchrun shutting its workers down. The handler does
nothing but record the signal, so no half-finished optimizer step is ever checkpointed. Any rank may be the
one signalled; ``RunContext.should_stop`` all-reduces the flag so every rank stops at the same step.
Job scripts treat exit code ``REQUEUE_EXIT_CODE`` (75, EX_TEMPFAIL) or a ``PREEMPTED`` file as "requeue me"
(both defined once, in the job-state contract :mod:`gputrain.contract.jobstate`).
"""

from __future__ import annotations

import signal
from types import FrameType

from gputrain.contract.jobstate import PREEMPTED_MARKER, REQUEUE_EXIT_CODE

PREEMPTED_FILE = PREEMPTED_MARKER
__all__ = ["PREEMPTED_FILE", "REQUEUE_EXIT_CODE", "PreemptionFlag"]
_MANUAL_CODE = 1000


class PreemptionFlag:
    """Installs handlers for SIGUSR1 and SIGTERM (main thread only) and remembers the first signal."""

    def __init__(self, signals: tuple[signal.Signals, ...] = (signal.SIGUSR1, signal.SIGTERM)) -> None:
        self.signal_name: str | None = None
        self._previous: dict[signal.Signals, object] = {}
        for sig in signals:
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal_name is None:
            self.signal_name = signal.Signals(signum).name

    @property
    def code(self) -> int:
        """The signal number (0: none, 1000 for ``trigger``) so ranks can agree on one with a MAX."""
        if self.signal_name is None:
            return 0
        try:
            return int(signal.Signals[self.signal_name])
        except KeyError:
            return _MANUAL_CODE

    def adopt(self, code: int) -> None:
        """Take the signal another rank received (after the all-reduce in ``should_stop``)."""
        if self.signal_name is None and code > 0:
            try:
                self.signal_name = signal.Signals(code).name
            except ValueError:
                self.signal_name = "manual"  # trigger() on another rank

    @property
    def raised(self) -> bool:
        return self.signal_name is not None

    def trigger(self, name: str = "manual") -> None:
        """Ask for a stop as if a signal had arrived (tests, time budgets)."""
        if self.signal_name is None:
            self.signal_name = name

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()
