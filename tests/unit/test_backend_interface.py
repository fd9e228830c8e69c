"""A backend is a class and a row: a toy written from :class:`gputrain.backends.base.Backend` alone is
submitted to, followed, listed and cancelled through the unchanged CLI (``submit --backend``, ``status``,
``cancel``, ``jobs``).

The toy runs each job as a real background process that writes one log line per step; it keeps its state in
the job registry like the shipped backends. Nothing in ``gputrain/cli`` names it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gputrain.backends import table
from gputrain.backends.base import Backend, JobRequest, JobStatus, Submission
from gputrain.contract import jobstate
from gputrain.registry.store import JobRecord, JobRegistry
from gputrain.registry.transitions import record_job, record_state

_JOB = """
import sys, time
from pathlib import Path
job_dir, steps = Path(sys.argv[1]), int(sys.argv[2])
with open(job_dir / "training_output.log", "a") as log:
    for step in range(1, steps + 1):
        print(f"toy step {step}/{steps}", file=log, flush=True)
        time.sleep(0.05)
(job_dir / "exit_code").write_text("0")
"""


class ToyBackend(Backend):
    """Jobs run as a local Python process; the registry row holds the pid."""

    name = "toy"
    plan_target = "local"

    def __init__(self, registry: JobRegistry | None = None) -> None:
        self.registry = registry or JobRegistry()

    def submit(self, request: JobRequest) -> Submission:
        plan = request.plan
        def place(job_id: str) -> Path:  # the folder is made inside the registry's write: both or neither
            job_dir = Path(request.logs_dir).absolute() / f"{plan.recipe.name}_job_{job_id}"
            job_dir.mkdir(parents=True)
            (job_dir / "plan.json").write_text(plan.to_json())
            return job_dir

        record = record_job(self.registry, JobRecord(job_id="", backend=self.name, recipe=plan.recipe.name,
                                                     state=jobstate.PENDING), locate=place)
        job_dir = Path(str(record.job_dir))
        proc = subprocess.Popen([sys.executable, "-c", _JOB, str(job_dir), str(plan.recipe.train.max_steps)],
                                start_new_session=True)
        record_state(self.registry, record.job_id, jobstate.RUNNING, pid=proc.pid)
        return Submission(job_id=record.job_id, job_dir=job_dir, script="")

    def status(self, job_id: str) -> JobStatus:
        rec = self.registry.get(job_id)
        if rec.state in jobstate.FINAL_STATES:
            return JobStatus(job_id, rec.state, exit_code=rec.exit_code)
        pid = int(rec.extra["pid"])
        try:
            finished, _ = os.waitpid(pid, os.WNOHANG)  # our child: reap it (a zombie would look alive)
        except ChildProcessError:
            finished = pid
        if not finished:
            return JobStatus(job_id, jobstate.RUNNING)
        exit_file = Path(str(rec.job_dir)) / "exit_code"
        code = int(exit_file.read_text()) if exit_file.is_file() else 1
        state = jobstate.COMPLETED if code == 0 else jobstate.FAILED
        record_state(self.registry, job_id, state, exit_code=code)
        return JobStatus(job_id, state, exit_code=code)

    def cancel(self, job_id: str) -> str:
        current = self.status(job_id)
        if current.state in jobstate.FINAL_STATES:
            return current.state
        os.killpg(int(self.registry.get(job_id).extra["pid"]), signal.SIGTERM)
        record_state(self.registry, job_id, jobstate.CANCELLED)
        return jobstate.CANCELLED


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    """The toy's row in the backend table; a private registry."""
    monkeypatch.setitem(table.BACKENDS, "toy", table.BackendSpec("toy", f"{__name__}:ToyBackend", "a test toy"))
    monkeypatch.setenv("GPUTRAIN_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return CliRunner()


def _cli(runner: CliRunner, *args: str) -> str:
    from gputrain.cli.app import app

    result = runner.invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_toy_backend_is_submitted_to_followed_and_cancelled_through_the_cli(toy: CliRunner) -> None:
    common = ("submit", "selftest", "--backend", "toy", "--gpu", "cpu", "--gpus", "1")
    followed = _cli(toy, *common, "--set", "train.max_steps=3", "--follow")
    assert "submitted job toy-1" in followed
    assert "toy step 3/3" in followed  # follow copied the job's log to the terminal until the end
    assert json.loads(_cli(toy, "status", "toy-1", "--json"))["state"] == "COMPLETED"

    started = json.loads(_cli(toy, *common, "--set", "train.max_steps=100000", "--json"))
    assert started["job_id"] == "toy-2" and Path(started["job_dir"]).is_dir()
    assert json.loads(_cli(toy, "status", "toy-2", "--json"))["state"] == "RUNNING"
    _cli(toy, "cancel", "toy-2")
    assert json.loads(_cli(toy, "status", "toy-2", "--json"))["state"] == "CANCELLED"
    listed = {r["job_id"]: r["state"] for r in json.loads(_cli(toy, "jobs", "--json"))}
    assert listed == {"toy-1": "COMPLETED", "toy-2": "CANCELLED"}
