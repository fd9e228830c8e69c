"""The backend interface every launcher implements (local torchrun, Slurm, RunPod).

Like submitit's executors: a backend turns a plan into a running job and answers status/cancel by the
backend's own job id; the CLI owns nothing backend-specific. Records go to the shared job registry.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan
    from gputrain.registry.store import JobRecord, JobRegistry


@dataclass
class Submission:
    """What a submit produced: the backend id, the job folder and the rendered script text."""

    job_id: str
    job_dir: Path
    script: str
    dry_run: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class JobStatus:
    """One job's state in gputrain's vocabulary (see gputrain.registry.store.STATES)."""

    job_id: str
    state: str
    reason: str = ""
    exit_code: int | None = None
    elapsed: str = ""
    nodes: str = ""
    restarts: int = 0
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Backend(ABC):
    """A place where jobs run: submit, status, cancel, where its logs are, and its own jobs.

    The CLI finds the backend of a job from its registry record (:mod:`gputrain.backends.table`) and calls
    these; nothing in ``gputrain jobs/status/cancel/logs`` knows a backend by name.
    """

    name: str
    registry: JobRegistry

    @abstractmethod
    def submit(self, plan: JobPlan, *, logs_dir: Path, dry_run: bool = False) -> Submission:
        """Write the job folder, start the job, record it; ``dry_run`` writes the script only."""

    @abstractmethod
    def status(self, job_id: str) -> JobStatus:
        """Current state; raises a GputrainError if the backend cannot be asked."""

    @abstractmethod
    def cancel(self, job_id: str) -> str:
        """Stop the job (pending or running) and return the state it is in after: CANCELLED, or the state it
        had already ended in (a finished job is never marked CANCELLED)."""

    def logs_location(self, record: JobRecord) -> Path | None:
        """The job folder on this machine (``training_output.log``, ``metrics.jsonl``, ``summary.json``)."""
        return Path(record.job_dir) if record.job_dir else None

    def refresh(self, records: list[JobRecord]) -> list[JobRecord]:
        """``records`` with this backend's unfinished ones brought up to date (default: the registry's word)."""
        return records

    def list_jobs(self, limit: int | None = 50) -> list[JobRecord]:
        """This backend's jobs, newest first, refreshed."""
        return self.refresh(self.registry.list(limit, backend=self.name))
