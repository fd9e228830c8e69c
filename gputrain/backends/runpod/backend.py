"""RunPod as a row of the backend table: status, cancel (terminate the pod) and logs of ``runpod up`` jobs.

A RunPod job is submitted by ``gputrain runpod up`` (it plans, creates the pod, uploads, trains over ssh and
downloads in one supervised command), which records it in the registry like any job; from then on
``gputrain jobs/status/cancel/logs`` treat it as they treat the others. The registry knows its state; the
API is asked only for what the registry cannot know (is the pod still there).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gputrain.backends.base import Backend, JobStatus, Submission
from gputrain.errors import GputrainError, UserError
from gputrain.registry.store import FINAL_STATES, JobRegistry

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan
    from gputrain.registry.store import JobRecord


class RunPodBackend(Backend):
    name = "runpod"

    def __init__(self, registry: JobRegistry | None = None) -> None:
        self.registry = registry or JobRegistry()

    def submit(self, plan: JobPlan, *, logs_dir: Path, dry_run: bool = False) -> Submission:
        raise UserError("a RunPod job starts with `gputrain runpod up RECIPE --gpu GPU --image IMAGE` (it creates "
                        "the pod, trains over ssh and brings the job folder back); `gputrain plan --target docker "
                        "--out DIR` writes its image")

    def status(self, job_id: str) -> JobStatus:
        rec = self.registry.get(job_id)
        reason = str(rec.extra.get("reason") or "")
        if rec.state not in FINAL_STATES:
            reason = self._pod_note(rec.job_id) or reason
        return JobStatus(rec.job_id, rec.state, reason=reason, exit_code=rec.exit_code, source="registry")

    @staticmethod
    def _pod_note(name: str) -> str:
        """What the API says about the job's pod; the reason it could not be asked when it could not."""
        from gputrain.backends.runpod.api import RunPodClient, load_api_key

        try:
            with RunPodClient(load_api_key()) as client:
                pods = [p for p in client.find_pods(name) if p.status != "TERMINATED"]
        except GputrainError as exc:
            return f"RunPod not asked: {exc.message}"
        return ", ".join(f"pod {p.id} {p.status}" for p in pods) or "no live pod"

    def refresh(self, records: list[JobRecord]) -> list[JobRecord]:
        """Unfinished RunPod records with their cost so far (billed rate × uptime), not stored."""
        import dataclasses
        import time

        from gputrain.backends.runpod.billing import live_cost

        now = time.time()
        out = []
        for rec in records:
            if rec.backend == self.name and rec.state not in FINAL_STATES:
                cost = live_cost(rec.extra, now)
                if cost is not None:
                    rec = dataclasses.replace(rec, extra={**rec.extra, "cost_usd": round(cost, 4)})
            out.append(rec)
        return out

    def cancel(self, job_id: str) -> str:
        """Terminate the job's pods (a pod bills until then); the registry records CANCELLED."""
        from gputrain.backends.runpod.manage import down_one

        rec = self.registry.get(job_id)
        if rec.state in FINAL_STATES:
            return rec.state
        down_one(rec.job_id)
        return self.registry.get(rec.job_id).state
