"""RunPod as a row of the backend table: submit + follow (``gputrain runpod up``), status, cancel (terminate
the pod) and logs.

A RunPod job runs attached: :meth:`RunPodBackend.submit` names the job (its pod name), and
:meth:`RunPodBackend.follow` drives the supervised session of :mod:`~gputrain.backends.runpod.up` (create
the pod, upload, train over ssh, download, terminate), which records it in the registry like any job; from
then on ``gputrain jobs/status/cancel/logs`` treat it as they treat the others. A dry run writes the Docker
build context into a job folder. The registry knows its state; the API is asked only for what the registry
cannot know (is the pod still there).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING

from gputrain.backends.base import Backend, JobRequest, JobStatus, Submission
from gputrain.errors import GputrainError, UserError
from gputrain.registry.store import FINAL_STATES, JobRegistry

if TYPE_CHECKING:
    from gputrain.backends.runpod.up import UpOptions
    from gputrain.registry.store import JobRecord


class RunPodBackend(Backend):
    """``up``: the pod's options (image, disk, cloud, timeouts ...) of ``gputrain runpod up``."""

    name = "runpod"
    plan_target = "docker"

    def __init__(self, registry: JobRegistry | None = None, *, up: UpOptions | None = None,
                 confirm: Callable[[str], None] | None = None) -> None:
        """``confirm`` is shown the pod's cost before anything is created and raises to refuse (the CLI asks
        on a terminal or requires ``--yes``); None: no question."""
        self.registry = registry or JobRegistry()
        self.up = up
        self.confirm = confirm

    def submit(self, request: JobRequest) -> Submission:
        """Name the run (its pod name); :meth:`follow` creates the pod and drives it. A dry run writes the
        image's build context and run scripts into a job folder."""
        if request.dry_run:
            from gputrain.backends.runpod.bundle import write_bundle

            stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
            job_dir = Path(request.logs_dir).absolute() / f"{request.plan.recipe.name}_job_dryrun_{stamp}"
            write_bundle(request.plan, job_dir)
            return Submission(job_id="dry-run", job_dir=job_dir, script="", dry_run=True)
        if self.up is None:
            raise UserError("a RunPod job needs its pod's options: `gputrain runpod up RECIPE --gpu GPU --image "
                            "IMAGE` (`gputrain docker RECIPE --gpu GPU` writes the image)")
        import dataclasses

        from gputrain.backends.runpod.api import load_api_key
        from gputrain.backends.runpod.owner import run_pod_name
        from gputrain.backends.runpod.pods import pod_name
        from gputrain.backends.runpod.up import Up

        load_api_key()  # no key: one line before anything is named or written
        plan = request.plan
        runner = Up(dataclasses.replace(self.up, plan=plan, logs_dir=Path(request.logs_dir)), confirm=self.confirm)
        base = pod_name(plan.recipe.name, plan.gpu.name, plan.gpus_per_node, self.up.image,
                        plan.resolved_recipe_data())
        name = self.up.name or ("" if self.up.attach else run_pod_name(base, runner.run_id))
        return Submission(job_id=name, job_dir=Path(request.logs_dir), script="", extra={"runner": runner})

    def follow(self, sub: Submission, *, echo: IO[str] | None = None, poll_s: float = 2.0) -> int:
        """Create the pod, train, download and terminate (the supervised session); the outcome is kept in
        ``sub.extra["outcome"]``. A job this process did not start is watched like any other."""
        from gputrain.backends.runpod.up import Up

        runner = sub.extra.get("runner")
        if not isinstance(runner, Up):
            return super().follow(sub, echo=echo, poll_s=poll_s)
        outcome = runner.go()
        sub.extra["outcome"] = outcome
        record = self.registry.find(sub.job_id) if sub.job_id else None
        if record is not None and record.job_dir:
            sub.job_dir = Path(record.job_dir)
        return outcome.exit_code if outcome.exit_code is not None else 1

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
