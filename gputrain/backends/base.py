"""The backend interface every launcher implements (local torchrun, Slurm, RunPod).

Like submitit's executors: a backend turns a plan into a running job and answers status/cancel by the
backend's own job id; the CLI owns nothing backend-specific. Records go to the shared job registry.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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
    """A place where jobs run."""

    name: str

    @abstractmethod
    def submit(self, plan: dict[str, Any], *, logs_dir: Path, dry_run: bool = False) -> Submission:
        """Write the job folder, start the job, record it; ``dry_run`` writes the script only."""

    @abstractmethod
    def status(self, job_id: str) -> JobStatus:
        """Current state; raises a GputrainError if the backend cannot be asked."""

    @abstractmethod
    def cancel(self, job_id: str) -> None:
        """Stop the job (pending or running)."""
