"""The backend interface every launcher implements (local torchrun, Slurm, RunPod).

Like submitit's executors: a backend turns a plan into a running job and answers status/cancel by the
backend's own job id; the CLI owns nothing backend-specific. Every submission, whichever command starts it
(``run``, ``submit``, ``runpod up``), goes through :func:`gputrain.cli.launch.launch`, which calls
:meth:`Backend.submit_all` and, when the user waits for the end, :meth:`Backend.follow`. Records go to the
shared job registry.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar

from gputrain.contract import jobstate
from gputrain.errors import GputrainError

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan
    from gputrain.registry.store import JobRecord, JobRegistry


LOG_FILE = "training_output.log"
"""The job's training output, in its job folder, on every backend."""


@dataclass(frozen=True)
class JobRequest:
    """One job to submit: its plan and what the user asked besides (the same for every backend)."""

    plan: JobPlan
    logs_dir: Path
    dry_run: bool = False
    sweep: tuple[str, ...] = ()  # this job's point of a --sweep grid, as --set texts
    resume_from: Path | None = None  # a job folder whose newest checkpoint the job starts from


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
    plan_target: ClassVar[str] = "local"
    """The plan's ``target`` (which scripts the renderer writes): local, slurm or docker."""
    needs_cluster: ClassVar[bool] = False
    """Whether a job needs a cluster profile (``--cluster``) to be planned."""

    @abstractmethod
    def submit(self, request: JobRequest) -> Submission:
        """Write the job folder, start the job, record it; ``request.dry_run`` writes the files only."""

    def submit_all(self, requests: Sequence[JobRequest]) -> list[Submission]:
        """Several jobs (the points of a ``--sweep``), in order. A failure after some went in names the ones
        that did, so a retry submits none twice. A backend with a cheaper way (a Slurm array) overrides it."""
        done: list[Submission] = []
        for request in requests:
            try:
                done.append(self.submit(request))
            except GputrainError as exc:
                if not done:
                    raise
                raise type(exc)(f"{exc.message} (after {len(done)} of {len(requests)} jobs were submitted: "
                                f"{', '.join(s.job_id for s in done)})", exit_code=exc.exit_code) from None
        return done

    def follow(self, sub: Submission, *, echo: IO[str] | None = None, poll_s: float = 2.0) -> int:
        """Wait for the job's end, copying new lines of its log to ``echo``; returns its exit code (1 when the
        backend does not know it). Backends that drive the job from this process (a foreground local run, a
        RunPod session) override it."""
        log = sub.job_dir / LOG_FILE
        offset = 0
        while True:
            state = self.status(sub.job_id)
            if echo is not None and log.is_file():
                with open(log, "rb") as fh:
                    fh.seek(offset)
                    chunk = fh.read()
                offset += len(chunk)
                echo.write(chunk.decode("utf-8", errors="replace"))
                echo.flush()
            if state.state in jobstate.FINAL_STATES:  # PREEMPTED comes back (requeued)
                return state.exit_code if state.exit_code is not None else 1
            time.sleep(poll_s)

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

