"""Preemption: a signal or a stop request only sets a flag; the training loop stops at a step boundary.

Two ways in, one flag:

- **The stop request file** (``STOP_REQUEST`` in the job folder, :mod:`gputrain.contract.jobstate`). The
  Slurm job script writes it when its preemption signal (``--signal=B:USR1@…``) arrives, and
  ``gputrain cancel --requeue`` writes it directly; :meth:`PreemptionFlag.poll` reads it once per step. No
  launcher (torchrun, srun) has to pass a signal on, so none of them can die of it, and a request made
  before the workers have started is seen at their first step: deferred, never lost.
- **Signals** sent to the workers themselves (SIGUSR1/SIGUSR2 from ``scancel --signal``, SIGTERM from
  ``docker stop`` or torchrun). The handler records the first one and nothing else, so no half-finished
  optimizer step is ever checkpointed. A signal that arrives before :class:`PreemptionFlag` exists (while
  torch is being imported) is caught by :func:`defer_early_signals`, installed by ``gputrain.train`` before
  anything heavy, and handed over when the flag is made.

Any rank may be the one told; ``RunContext.should_stop`` all-reduces the flag so every rank stops at the
same step. Job scripts treat exit code ``REQUEUE_EXIT_CODE`` (75, EX_TEMPFAIL) plus a ``PREEMPTED`` file as
"checkpointed"; whether the job is requeued depends on the cause (the job-state contract).
"""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType

from gputrain.contract.jobstate import PREEMPTED_MARKER, REQUEUE_EXIT_CODE, read_stop_request

PREEMPTED_FILE = PREEMPTED_MARKER
__all__ = ["PREEMPTED_FILE", "REQUEUE_EXIT_CODE", "PreemptionFlag", "defer_early_signals"]
_MANUAL_CODE = 1000
_REQUEST_CODE = 1001
STOP_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM)

_early: list[str] = []  # signals caught before a PreemptionFlag existed


def _record_early(signum: int, frame: FrameType | None) -> None:
    if not _early:
        _early.append(signal.Signals(signum).name)


def defer_early_signals() -> None:
    """Record SIGUSR1/SIGUSR2 until a :class:`PreemptionFlag` takes over, instead of dying of them.

    Only where the default (terminate) or an inherited "ignore" is in place; SIGTERM keeps its default
    until the flag exists (a cancel before the first step should just end the process).
    """
    try:
        for sig in (signal.SIGUSR1, signal.SIGUSR2):
            if signal.getsignal(sig) in (signal.SIG_DFL, signal.SIG_IGN):
                signal.signal(sig, _record_early)
    except ValueError:  # not the main thread
        pass


class PreemptionFlag:
    """Installs handlers for SIGUSR1, SIGUSR2 and SIGTERM (main thread only), remembers the first signal, and
    polls ``request_dir``'s stop request (:meth:`poll`)."""

    def __init__(self, signals: tuple[signal.Signals, ...] = STOP_SIGNALS,
                 request_dir: Path | None = None) -> None:
        self.signal_name: str | None = _early[0] if _early else None
        self.cause: str | None = None
        self.request_dir = request_dir
        self._previous: dict[signal.Signals, object] = {}
        for sig in signals:
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal_name is None:
            self.signal_name = signal.Signals(signum).name

    def poll(self) -> None:
        """Take a pending stop request from the job folder (one stat per step when there is none)."""
        if self.cause is not None or self.request_dir is None:
            return
        request = read_stop_request(self.request_dir)
        if request is None:
            return
        self.cause = request["cause"]
        if self.signal_name is None:
            self.signal_name = request["signal"] or "request"

    @property
    def code(self) -> int:
        """The signal number (0: none, 1000 for ``trigger``, 1001 for a stop request) so ranks can agree on
        one with a MAX."""
        if self.signal_name is None:
            return 0
        try:
            return int(signal.Signals[self.signal_name])
        except KeyError:
            return _REQUEST_CODE if self.signal_name == "request" else _MANUAL_CODE

    def adopt(self, code: int) -> None:
        """Take the signal another rank received (after the all-reduce in ``should_stop``)."""
        if self.signal_name is None and code > 0:
            try:
                self.signal_name = signal.Signals(code).name
            except ValueError:
                self.signal_name = "request" if code == _REQUEST_CODE else "manual"  # trigger() elsewhere

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
