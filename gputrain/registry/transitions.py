"""The one writer of job state: every registry write of every backend, runner and command goes through here.

Why one module: a job's state used to be written from eleven places in five modules, each with its own idea
of which fields go with a state (a local run wrote its row four times). Here a job is *recorded* once (its
folder placed in the same transaction, so a row never points at a folder that is not there), then moves
between the states of :mod:`gputrain.contract.jobstate` with :func:`record_state` (exit code and the facts
that explain it in the same write), and collects facts that are not a state (pids, pod ids, a cancel
request) with :func:`record_facts`. ``tests/unit/test_job_state_writer.py`` fails if any other module of
the package writes the registry, and counts the writes of one local run.

How a job *ended* is decided elsewhere, once: :func:`gputrain.contract.jobstate.end_state` (exit code, the
markers in its folder, what the scheduler says); this module only records the verdict.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gputrain.contract.jobstate import CANCELLED
from gputrain.registry.store import JobRecord, JobRegistry

_KEEP: Any = object()
"""``exit_code`` left as stored."""


def record_job(registry: JobRegistry, record: JobRecord,
               locate: Callable[[str], Path] | None = None) -> JobRecord:
    """Record a new job (an empty ``job_id`` gets the registry's ``<backend>-<n>``). ``locate(job_id)``,
    when given, puts the job's folder in place and returns it, inside the same write: the row then carries
    its ``name`` and ``job_dir``, and a ``locate`` that raises leaves no row behind."""
    return registry.add(record, locate=locate)


def record_state(registry: JobRegistry, job_id: str, state: str, /, *, exit_code: int | None = _KEEP,
                 **facts: Any) -> JobRecord:
    """Move ``job_id`` to ``state`` (one of :data:`gputrain.contract.jobstate.STATES`), with its exit code
    and the facts that explain it (``reason``...), in one write."""
    fields: dict[str, Any] = {"state": state}
    if exit_code is not _KEEP:
        fields["exit_code"] = exit_code
    if facts:
        fields["extra"] = facts
    return registry.update(job_id, **fields)


def record_facts(registry: JobRegistry, job_id: str, /, **facts: Any) -> JobRecord:
    """Add facts about ``job_id`` that are not a state change (pids, a pod id, a cancel request)."""
    return registry.update(job_id, extra=facts)


def forget_jobs(registry: JobRegistry, records: Iterable[JobRecord]) -> builtins.list[JobRecord]:
    """Remove finished jobs from the registry (never unfinished ones); their folders stay on disk."""
    return registry.forget(records)


def withdraw_jobs(registry: JobRegistry, job_ids: Iterable[str], /, **facts: Any) -> builtins.list[JobRecord]:
    """Remove the rows of jobs whose submission was rolled back: cancelled while held, they never ran and
    their folders are gone (:mod:`gputrain.backends.slurm_submit`). Recorded CANCELLED first, so the rule of
    :func:`forget_jobs` holds (only ended jobs leave the registry) and a row that cannot be removed is true."""
    records = [record_state(registry, job_id, CANCELLED, **facts) for job_id in job_ids]
    return registry.forget(records)
