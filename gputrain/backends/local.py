"""Local backend: the rendered ``launch.sh`` (torchrun) on this machine, recorded like any other job.

    gputrain run recipes/gnn_coloring.yaml --gpu cpu --gpus 2

The job folder is staged under a hidden name, then recorded and renamed to ``<recipe>_job_local-<id>_<stamp>``
in one registry write (the registry hands out ``local-<id>``); a failure removes the folder and leaves no
record, so nothing is left half-made. A foreground run writes its row three times: recorded, RUNNING, ended. In the
foreground, torchrun's output is copied line by line to the terminal and ``training_output.log``; with
``--detach`` the same supervisor runs as ``python -m gputrain.backends.local supervise JOB_DIR JOB_ID`` in
its own session. Either way the supervisor records the end state and writes the summary.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING

from gputrain.atomic import write_atomic
from gputrain.backends.base import LOG_FILE, Backend, JobRequest, JobStatus, Submission
from gputrain.backends.processes import alive, end_tree
from gputrain.contract import jobstate
from gputrain.errors import GputrainError
from gputrain.registry.store import JobRecord, JobRegistry
from gputrain.registry.transitions import record_facts, record_job, record_state

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan

RECORD_WAIT_S = 30.0  # how long `cancel` waits for the supervisor to record the end state


class LocalBackend(Backend):
    """``attached``: the job runs in this process's foreground when :meth:`follow` is called (``gputrain
    run``); otherwise :meth:`submit` starts a detached supervisor (``--detach``)."""

    name = "local"
    plan_target = "local"

    def __init__(self, registry: JobRegistry | None = None, *, attached: bool = False) -> None:
        self.registry = registry or JobRegistry()
        self.attached = attached
        self.interrupted_by: str | None = None  # SIGINT/SIGTERM that stopped a foreground run

    def prepare(self, plan: JobPlan, *, logs_dir: Path) -> Submission:
        """Write the job folder and the registry record (state PENDING); start nothing."""
        import yaml

        from gputrain.contract.provenance import PROVENANCE_FILE, launch_json
        from gputrain.render import render_artifacts

        plan = plan.model_copy(update={"target": "local", "artifacts": {**plan.artifacts, "launch.sh": "launch.sh"}})
        logs_dir = Path(logs_dir).absolute()
        stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
        recipe = plan.recipe.name
        staging = logs_dir / f".staging_{recipe}_{stamp}_{uuid.uuid4().hex[:8]}"
        script = render_artifacts(plan, job_dir=None, target="local")["launch.sh"]
        files = {
            "launch.sh": script,
            "plan.json": plan.to_json(),
            "recipe.resolved.yaml": yaml.safe_dump(plan.resolved_recipe_data(), sort_keys=False),
            PROVENANCE_FILE: launch_json(),
        }
        try:
            (staging / "checkpoints").mkdir(parents=True)
            for name, text in files.items():
                write_atomic(staging / name, text, 0o755 if name.endswith(".sh") else 0o644)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise GputrainError(f"cannot write job folder under {logs_dir}: {exc.strerror}") from None
        placed: list[Path] = []

        def place(job_id: str) -> Path:  # inside the registry's write: the row and the folder appear together
            job_dir = logs_dir / f"{recipe}_job_{job_id}_{stamp}"
            try:
                os.rename(staging, job_dir)
            except OSError as exc:
                raise GputrainError(f"cannot create job folder {job_dir}: {exc.strerror}") from None
            placed.append(job_dir)
            return job_dir

        record = JobRecord(job_id="", backend="local", recipe=recipe, recipe_path=plan.recipe_path,
                           state=jobstate.PENDING, gpu=plan.gpu.name, gpus_per_node=plan.gpus_per_node,
                           nodes=plan.nodes)
        try:
            record = record_job(self.registry, record, locate=place)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            for job_dir in placed:  # placed, then the commit failed: the folder goes with the row
                shutil.rmtree(job_dir, ignore_errors=True)
            raise
        assert record.job_dir is not None
        job_dir = Path(record.job_dir)
        return Submission(job_id=record.job_id, job_dir=job_dir, script=script)

    def submit(self, request: JobRequest) -> Submission:
        """Prepare (seeded from ``resume_from``) and start detached; attached, :meth:`follow` starts it."""
        if request.dry_run:
            return self._dry_run(request)
        sub = self.prepare(request.plan, logs_dir=request.logs_dir)
        if request.resume_from is not None:
            from gputrain.backends.resume import seed_checkpoint

            try:
                seeded = seed_checkpoint(request.resume_from, sub.job_dir)
            except BaseException:
                record_state(self.registry, sub.job_id, jobstate.CANCELLED, reason="resume failed")
                raise
            sub.extra["resumed_from"] = f"{seeded.name} of {request.resume_from}"
        if not self.attached:
            sub.extra["supervisor_pid"] = self.detach(sub)
        return sub

    def _dry_run(self, request: JobRequest) -> Submission:
        """The job folder's files under ``<recipe>_job_dryrun_<stamp>``, recorded nowhere, started never."""
        import yaml

        from gputrain.render import render_artifacts

        plan = request.plan.model_copy(update={"target": "local",
                                               "artifacts": {**request.plan.artifacts, "launch.sh": "launch.sh"}})
        script = render_artifacts(plan, job_dir=None, target="local")["launch.sh"]
        stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
        job_dir = Path(request.logs_dir).absolute() / f"{plan.recipe.name}_job_dryrun_{stamp}_{uuid.uuid4().hex[:4]}"
        try:
            (job_dir / "checkpoints").mkdir(parents=True)
            write_atomic(job_dir / "launch.sh", script, 0o755)
            write_atomic(job_dir / "plan.json", plan.to_json())
            write_atomic(job_dir / "recipe.resolved.yaml", yaml.safe_dump(plan.resolved_recipe_data(), sort_keys=False))
        except OSError as exc:
            raise GputrainError(f"cannot write job folder {job_dir}: {exc.strerror}") from None
        return Submission(job_id="dry-run", job_dir=job_dir, script=script, dry_run=True)

    def follow(self, sub: Submission, *, echo: IO[str] | None = None, poll_s: float = 1.0) -> int:
        """Attached: run the job in the foreground now; detached: watch it like any backend's."""
        if self.attached and "supervisor_pid" not in sub.extra:
            return self.run(sub, echo=echo)
        return super().follow(sub, echo=echo, poll_s=poll_s)

    def detach(self, sub: Submission) -> int:
        cmd = [sys.executable, "-m", "gputrain.backends.local", "supervise", str(sub.job_dir), sub.job_id]
        env = {**os.environ, "GPUTRAIN_REGISTRY": str(self.registry.path)}
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
        record_facts(self.registry, sub.job_id, supervisor_pid=proc.pid)
        return proc.pid

    def run(self, sub: Submission, *, echo: IO[str] | None = None) -> int:
        """torchrun in the foreground: output to ``echo`` and the log, end state + summary; returns rc."""
        job_dir = sub.job_dir
        env = {**os.environ, "GPUTRAIN_JOB_DIR": str(job_dir), "PYTHON": os.environ.get("PYTHON", sys.executable)}
        env.setdefault("OMP_NUM_THREADS", "1")
        cancelled = False
        if self._cancel_requested(sub.job_id):  # cancelled while the detached supervisor was starting
            jobstate.write_cancel_marker(job_dir, "gputrain cancel")
            record_state(self.registry, sub.job_id, jobstate.CANCELLED, reason="cancelled before start")
            return 1
        with open(job_dir / LOG_FILE, "a", encoding="utf-8", errors="replace") as log:
            try:
                proc = subprocess.Popen(
                    ["bash", str(job_dir / "launch.sh")],
                    cwd=os.getcwd(),
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                    bufsize=1,
                    start_new_session=True,
                )
            except OSError as exc:
                record_state(self.registry, sub.job_id, jobstate.FAILED, reason=str(exc))
                raise GputrainError(f"cannot start {job_dir / 'launch.sh'}: {exc.strerror}") from None
            record_state(self.registry, sub.job_id, jobstate.RUNNING, pid=proc.pid)
            if self._cancel_requested(sub.job_id):  # a cancel that raced the start: honour it now
                cancelled = True
                os.killpg(proc.pid, signal.SIGTERM)

            def forward(signum: int, frame: FrameType | None) -> None:
                nonlocal cancelled
                if signum in (signal.SIGINT, signal.SIGTERM) and not cancelled:
                    cancelled = True  # Ctrl-C of a foreground run, or the supervisor told to stop
                    self.interrupted_by = signal.Signals(signum).name
                    jobstate.write_cancel_marker(job_dir, self.interrupted_by)
                try:
                    os.killpg(proc.pid, signal.SIGTERM if signum == signal.SIGINT else signum)
                except ProcessLookupError:
                    pass

            from gputrain.logs.follow import display_line

            previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    log.write(line)
                    log.flush()
                    if echo is not None:  # the job's output is not ours: escape sequences shown, never acted on
                        echo.write(display_line(line.encode("utf-8", "replace")) + "\n")
                        echo.flush()
                rc = proc.wait()
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)
        cancelled = cancelled or self._cancel_requested(sub.job_id)
        if cancelled and not (job_dir / jobstate.CANCELLED_MARKER).is_file():  # the cancel raced the start
            jobstate.write_cancel_marker(job_dir, "gputrain cancel")
        ending = jobstate.end_state(rc, jobstate.markers_in(job_dir), jobstate.BackendFacts(user_cancelled=cancelled))
        self._summarize(job_dir, rc)  # first: a final registry state means the summary is there
        record_state(self.registry, sub.job_id, ending.state, exit_code=rc, reason=ending.reason)
        return rc

    def _cancel_requested(self, job_id: str) -> bool:
        fresh = self.registry.find(job_id)
        return bool(fresh and (fresh.state == jobstate.CANCELLED or (fresh.extra or {}).get("cancel_requested")))

    @staticmethod
    def _summarize(job_dir: Path, rc: int | None) -> None:
        """The final summary; its end state comes from the same contract (exit code + markers) as ours."""
        try:
            from gputrain.logs.summarize import summarize

            summarize(job_dir, final=True, exit_code=rc)
        except GputrainError as exc:
            print(f"gputrain: warning: summary not written: {exc}", file=sys.stderr)

    def status(self, job_id: str) -> JobStatus:
        rec = self.registry.get(job_id)
        state = rec.state
        pid = (rec.extra or {}).get("pid")
        if state == jobstate.RUNNING and isinstance(pid, int) and not alive(pid):
            state = jobstate.UNKNOWN  # the supervisor died without recording the end
        return JobStatus(job_id=rec.job_id, state=state, exit_code=rec.exit_code,
                         reason=str((rec.extra or {}).get("reason") or ""), source="registry")

    def cancel(self, job_id: str) -> str:
        """End the job and every process it started; the end state is recorded as CANCELLED. A job that has
        already ended is left as it is (its state is returned); returns the state the job ends in."""
        rec = self.registry.get(job_id)
        if rec.state in jobstate.ENDED_STATES:
            return rec.state
        if rec.job_dir:
            jobstate.write_cancel_marker(rec.job_dir, "gputrain cancel")  # before the signal: no other verdict
        record_facts(self.registry, job_id, cancel_requested=True)
        pid = (rec.extra or {}).get("pid")
        if isinstance(pid, int) and alive(pid):
            end_tree(pid)  # torchrun passes SIGTERM on; the runtime checkpoints and exits (then SIGKILL)
            fresh = self._wait_recorded(job_id)
            if fresh.state in jobstate.ENDED_STATES:
                return fresh.state
        supervisor = (rec.extra or {}).get("supervisor_pid")
        if isinstance(supervisor, int) and alive(supervisor) and rec.state == jobstate.PENDING:
            return self._wait_recorded(job_id).state  # it sees the request before it starts anything
        # Nobody left to record the end (never started, or the supervisor died): record it here.
        if rec.job_dir and Path(rec.job_dir).is_dir():
            self._summarize(Path(rec.job_dir), rec.exit_code)
        record_state(self.registry, job_id, jobstate.CANCELLED, reason="cancelled by the user")
        return jobstate.CANCELLED

    def _wait_recorded(self, job_id: str) -> JobRecord:
        """The record once the supervisor has written an end state (or after :data:`RECORD_WAIT_S`)."""
        deadline = time.monotonic() + RECORD_WAIT_S
        while True:
            fresh = self.registry.get(job_id)
            if fresh.state in jobstate.ENDED_STATES or time.monotonic() > deadline:
                return fresh
            time.sleep(0.2)


def _supervise(job_dir: str, job_id: str) -> int:
    registry = JobRegistry(os.environ.get("GPUTRAIN_REGISTRY") or None)
    backend = LocalBackend(registry)
    return backend.run(Submission(job_id=job_id, job_dir=Path(job_dir), script=""))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "supervise":
        sys.exit(_supervise(sys.argv[2], sys.argv[3]))
    print("usage: python -m gputrain.backends.local supervise JOB_DIR JOB_ID", file=sys.stderr)
    sys.exit(2)
