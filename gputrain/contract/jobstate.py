"""The job-folder contract: exit codes, marker files and end states, and the one rule that maps them.

Every place that decides how a job ended asks :func:`end_state`: the local supervisor, the Slurm job script's
closing summary (``gputrain logs --final``), ``gputrain status``/``jobs``, the RunPod runner and the summary
files. So a cancelled job is CANCELLED in the registry, in ``summary.json`` and in ``jobs``, and a preempted
one PREEMPTED everywhere. Standard library only: job scripts and the registry import it.

The folder contract (``<logs>/<recipe>_job_<id>_<stamp>/``):

- ``plan.json`` (:mod:`gputrain.contract.plan`), ``training_output.log``, ``metrics.jsonl``, ``checkpoints/``;
- ``PREEMPTED`` (:data:`PREEMPTED_MARKER`): the training stopped at a step boundary after SIGUSR1/SIGTERM,
  checkpointed and exited :data:`REQUEUE_EXIT_CODE`; the job script may requeue it. JSON: step, signal, time.
- ``CANCELLED`` (:data:`CANCELLED_MARKER`): a user asked to cancel the job (``gputrain cancel`` writes it
  *before* the signal; the Slurm job script writes it when SIGTERM reaches it); never requeued, CANCELLED for
  every reader. JSON: by, time.
- ``STOP_REQUEST`` (:data:`STOP_REQUEST_FILE`): why the job is asked to stop, written *before* any signal by
  the Slurm job script (on its preemption signal) or by ``gputrain cancel --requeue``. The workers poll it at
  every step boundary, so a request that arrives before their signal handlers exist is deferred, never lost,
  and no launcher has to pass a signal on. JSON: cause (:data:`STOP_CAUSES`), signal, time.
- ``TIMEOUT`` (:data:`TIMEOUT_MARKER`): the job checkpointed at its time limit and was not requeued (the
  profile's ``max_timeout_requeues``): TIMEOUT for every reader although it exited by itself.

Requeue rule per cause (the Slurm job script applies it): ``cancelled`` never; ``preemption`` up to
``max_requeues``; ``time_limit`` up to ``max_timeout_requeues`` (0 by default); ``requested`` (``gputrain
cancel --requeue``) always.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

REQUEUE_EXIT_CODE = 75
"""The training checkpointed and asks to be run again (EX_TEMPFAIL)."""

PREEMPTED_MARKER = "PREEMPTED"
CANCELLED_MARKER = "CANCELLED"
TIMEOUT_MARKER = "TIMEOUT"
STOP_REQUEST_FILE = "STOP_REQUEST"
MARKERS = (PREEMPTED_MARKER, CANCELLED_MARKER, TIMEOUT_MARKER)
ATTEMPT_MARKERS = (PREEMPTED_MARKER, TIMEOUT_MARKER)
"""Markers one attempt writes as it stops (the user's CANCELLED holds for the whole job)."""
STOP_CAUSES = ("preemption", "time_limit", "requested")
"""Why a job is asked to checkpoint and stop (the ``cause`` of :data:`STOP_REQUEST_FILE`)."""

PENDING, RUNNING, REQUEUED = "PENDING", "RUNNING", "REQUEUED"
COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED = "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED"
NODE_FAIL = "NODE_FAIL"
"""A node of the job failed under it (Slurm's NODE_FAIL): nothing in the job was wrong; Slurm may requeue it."""
LOST = "LOST"
"""The runner lost the job (a RunPod run whose connection dropped and whose exit code never came back)."""
UNKNOWN = "UNKNOWN"

STATES = (PENDING, RUNNING, REQUEUED, COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED, NODE_FAIL, LOST, UNKNOWN)
FINAL_STATES = frozenset({COMPLETED, FAILED, CANCELLED, TIMEOUT, LOST})
"""States a job never leaves."""
ENDED_STATES = FINAL_STATES | {PREEMPTED, NODE_FAIL}
"""No process of the job runs: final, or preempted or its node failed (a scheduler may requeue it, and then it runs
again)."""
LIVE_STATES = frozenset({PENDING, RUNNING, REQUEUED})


@dataclass(frozen=True)
class BackendFacts:
    """What the runner knows besides the exit code and the folder.

    ``user_cancelled``: a cancel was asked (registry flag, Ctrl-C of a foreground run). ``scheduler_state``: the
    scheduler's verdict in gputrain's vocabulary (Slurm's TIMEOUT, CANCELLED, PREEMPTED...). ``log_causes``: causes
    the log shows (``gputrain.logs.classify``: ``time_limit``, ``preempted``, ``cancelled``...).
    ``connection_lost``: the runner lost the job before its exit code came back (RunPod over ssh).
    """

    user_cancelled: bool = False
    scheduler_state: str | None = None
    log_causes: frozenset[str] = frozenset()
    connection_lost: bool = False


@dataclass(frozen=True)
class Ending:
    state: str
    reason: str


def end_state(exit_code: int | None, markers: Iterable[str] = (), facts: BackendFacts | None = None) -> Ending:
    """How a job that has stopped ended, and why, from its exit code, the markers in its folder and ``facts``.

    Order: exit 0 is COMPLETED (a stale marker of an earlier attempt does not undo a resumed run that
    finished); a user's cancel wins over PREEMPTED (the runtime checkpoints on any SIGTERM, so a cancelled run
    also leaves PREEMPTED and exits 75); a lost runner is LOST; the scheduler's or the log's time limit, or the
    TIMEOUT marker (checkpointed at the limit, not requeued), is TIMEOUT; a node failure the scheduler or the log
    names is NODE_FAIL; a PREEMPTED marker, exit 75 or the
    scheduler's preemption is PREEMPTED; any other code FAILED.
    """
    facts = facts or BackendFacts()
    present = frozenset(markers)
    sched, causes = facts.scheduler_state, facts.log_causes
    if exit_code == 0:
        return Ending(COMPLETED, "exit code 0")
    if facts.user_cancelled or CANCELLED_MARKER in present:
        return Ending(CANCELLED, "cancelled by the user")
    if sched == CANCELLED or "cancelled" in causes:
        return Ending(CANCELLED, "cancelled (the scheduler says so)")
    if facts.connection_lost and exit_code is None:
        return Ending(LOST, "the connection to the job was lost before it reported an exit code")
    if sched == TIMEOUT or "time_limit" in causes or TIMEOUT_MARKER in present:
        return Ending(TIMEOUT, "time limit reached")
    if sched == NODE_FAIL:  # the processes died with the node: their exit code says nothing
        return Ending(NODE_FAIL, "a node of the job failed (Slurm NODE_FAIL)")
    if (PREEMPTED_MARKER in present or exit_code == REQUEUE_EXIT_CODE or sched == PREEMPTED
            or "preempted" in causes):
        return Ending(PREEMPTED, "checkpointed and stopped for a requeue (preemption signal)")
    if exit_code is None:
        if sched in FINAL_STATES:
            return Ending(sched, f"the scheduler says {sched}")
        return Ending(UNKNOWN, "no exit code")
    return Ending(FAILED, f"exit code {exit_code}")


def markers_in(job_dir: str | os.PathLike[str] | None, attempt_start: float | None = None) -> frozenset[str]:
    """The marker files present in ``job_dir`` (none for a missing folder or a log file).

    ``attempt_start`` (epoch seconds, whole-second resolution like the scheduler's clock): an attempt's own
    marker (:data:`ATTEMPT_MARKERS`) older than it is the previous attempt's. The job script renames those
    when it starts, but a requeued job can fail before its script runs (Slurm: "Job credential revoked", a
    prolog failure), and the earlier attempt's PREEMPTED then made the failed job look preempted forever.
    """
    if job_dir is None:
        return frozenset()
    folder = Path(job_dir)
    present = set()
    for marker in MARKERS:
        try:
            info = (folder / marker).stat()
        except OSError:
            continue
        stale = attempt_start is not None and marker in ATTEMPT_MARKERS and info.st_mtime < int(attempt_start)
        if stat.S_ISREG(info.st_mode) and not stale:
            present.add(marker)
    return frozenset(present)


def write_cancel_marker(job_dir: str | os.PathLike[str], by: str) -> None:
    """Record that a user asked for the cancel, before any signal is sent (so no requeue, and CANCELLED
    everywhere). Written atomically; a folder that is gone (or read-only) is not an error: the registry
    records the cancel too."""
    from gputrain.atomic import write_atomic

    try:
        write_atomic(Path(job_dir) / CANCELLED_MARKER, json.dumps({"by": by, "time": time.time()}) + "\n")
    except OSError:
        pass


def write_stop_request(job_dir: str | os.PathLike[str], cause: str, signal: str = "") -> None:
    """Ask the job's workers to checkpoint and stop at their next step (``cause`` from :data:`STOP_CAUSES`)."""
    from gputrain.atomic import write_atomic

    if cause not in STOP_CAUSES:
        raise ValueError(f"unknown stop cause {cause!r}")
    info = {"cause": cause, "signal": signal, "time": time.time()}
    write_atomic(Path(job_dir) / STOP_REQUEST_FILE, json.dumps(info) + "\n")


def read_stop_request(job_dir: str | os.PathLike[str]) -> dict[str, str] | None:
    """The pending stop request of ``job_dir`` (None: none, or not readable yet)."""
    try:
        data = json.loads((Path(job_dir) / STOP_REQUEST_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return {"cause": str(data.get("cause") or "preemption"), "signal": str(data.get("signal") or "")}
