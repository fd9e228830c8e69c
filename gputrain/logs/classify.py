"""Why did a job stop? Failure causes from log lines; the end state itself comes from the job-state contract
(:func:`gputrain.contract.jobstate.end_state`: exit code, marker files, what the log shows).

Line patterns are the messages the tools really print: PyTorch's ``torch.OutOfMemoryError: CUDA out of
memory``, NCCL's ``ncclInternalError`` / watchdog timeouts, slurmstepd's ``*** JOB 12 ON n1 CANCELLED AT
... DUE TO TIME LIMIT ***``, torchrun's ``Signal 9 (SIGKILL) received by PID``, the shell's ``Killed``.
Several causes often appear together (one rank runs out of memory, the others then fail in NCCL);
:data:`PRIORITY` picks the root cause.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable

from gputrain.contract import jobstate

CAUSE_LABELS = {
    "setup": "cluster set-up failed",
    "preempted": "preempted",
    "time_limit": "time limit",
    "cuda_oom": "CUDA out of memory",
    "host_oom": "host out of memory (OOM killer)",
    "nccl": "NCCL error",
    "exception": "Python exception",
    "signal": "killed by signal",
    "cancelled": "cancelled",
    "lost": "connection lost",
    "exit_code": "non-zero exit code",
}
PRIORITY = ("setup", "preempted", "time_limit", "cuda_oom", "host_oom", "nccl", "exception", "signal", "cancelled")

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("setup", re.compile(r"^\[gputrain\] error: set-up line \d+ failed")),
    ("time_limit", re.compile(r"DUE TO TIME LIMIT")),
    ("preempted", re.compile(r"DUE TO PREEMPTION|job was preempted", re.IGNORECASE)),
    (
        "cuda_oom",
        re.compile(
            r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|"
            r"HIP out of memory|CUDA error: out of memory"
        ),
    ),
    # the kernel's OOM killer, slurmstepd's oom-kill events, Ray's memory monitor ("1 Workers (tasks / actors) killed
    # due to memory pressure (OOM)")
    ("host_oom", re.compile(r"oom[-_]kill|Out of memory: Killed process|killed due to memory pressure", re.IGNORECASE)),
    (
        "nccl",
        re.compile(
            r"NCCL [Ee]rror|nccl(?:Internal|System|UnhandledCuda|Remote|InvalidUsage)Error|Timeout at NCCL work|"
            r"Watchdog caught collective operation timeout|NCCL communicator was aborted|"
            r"ProcessGroupNCCL.*(?:timed out|Timeout)"
        ),
    ),
    ("cancelled", re.compile(r"\*\*\* JOB \S+ ON \S+ CANCELLED AT")),
    (
        "signal",
        re.compile(
            r"Signals\.SIG[A-Z]+|Signal \d+ \(SIG[A-Z]+\) received|^Killed\s*$|"
            r"exitcode\s*:\s*-\d+"
        ),
    ),
]

def classify_line(text: str) -> str | None:
    """The failure cause a single line shows, or None (most lines)."""
    for cause, pattern in _PATTERNS:
        if pattern.search(text):
            return cause
    return None


def signal_name(exit_code: int | None) -> str | None:
    """``137`` (shell: 128+9) or ``-9`` (Python subprocess) → ``SIGKILL``."""
    if exit_code is None:
        return None
    number = -exit_code if exit_code < 0 else exit_code - 128 if 128 < exit_code < 160 else 0
    if number <= 0:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


_CAUSE_OF_STATE = {
    jobstate.CANCELLED: "cancelled", jobstate.PREEMPTED: "preempted", jobstate.TIMEOUT: "time_limit",
    jobstate.LOST: "lost",
}


def classify_failure(
    exit_code: int | None,
    events: dict[str, str],
    markers: Iterable[str] = (),
    facts: jobstate.BackendFacts | None = None,
) -> tuple[str, str | None]:
    """(state, cause) of a job that has ended; ``events`` maps cause → the last line that showed it, ``markers``
    are the marker files in its folder (``PREEMPTED``, ``CANCELLED``).

    The state is :func:`gputrain.contract.jobstate.end_state`'s (exit code 0 is COMPLETED whatever the log
    says: a recovered NCCL warning is not a failure); the cause of a failure is the log's root cause.
    """
    facts = facts or jobstate.BackendFacts()
    facts = jobstate.BackendFacts(facts.user_cancelled, facts.scheduler_state,
                                  facts.log_causes | frozenset(events), facts.connection_lost)
    state = jobstate.end_state(exit_code, markers, facts).state
    if state == jobstate.COMPLETED:
        return state, None
    if state in _CAUSE_OF_STATE:
        return state, _CAUSE_OF_STATE[state]
    cause = next((c for c in PRIORITY if c in events), None)
    if cause is None and signal_name(exit_code):
        cause = "signal"
    if cause is None and exit_code is not None:
        cause = "exit_code"
    return state, cause


def describe(cause: str | None, exit_code: int | None, events: dict[str, str]) -> str:
    """One line for the summary: ``CUDA out of memory: torch.OutOfMemoryError: CUDA out of memory...``."""
    if cause is None:
        return ""
    label = CAUSE_LABELS.get(cause, cause)
    if cause == "signal" and signal_name(exit_code):
        return f"{label}: {signal_name(exit_code)} (exit code {exit_code})"
    if cause == "exit_code":
        return f"{label} {exit_code}"
    line = events.get(cause, "").strip()
    return f"{label}: {line[:200]}" if line else label
