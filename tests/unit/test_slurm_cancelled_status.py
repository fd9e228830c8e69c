"""`gputrain status` of a Slurm job the user cancelled (#30, left over from #18/#21).

scancel sends SIGTERM; the runtime checkpoints and the job script exits with gputrain's requeue code 75 (no
requeue: the CANCELLED marker says the user asked), and Slurm's ``Reason`` of an ended job is the word "None".
Neither is the user's news: the status said "exit code 75" and "reason None".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gputrain.backends.slurm import SlurmBackend
from gputrain.backends.slurm_parse import parse_scontrol_job
from gputrain.contract import jobstate
from gputrain.registry.store import JobRecord, JobRegistry

RECORDED = Path(__file__).parent / "data" / "slurm" / "scontrol_cancelled.txt"


def test_cancelled_job_has_no_exit_code_75_and_no_reason_none(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # the recorded `scontrol show job -o` of a cancelled job, with the exit status gputrain's job script gives
    line = RECORDED.read_text().replace("ExitCode=0:15", f"ExitCode={jobstate.REQUEUE_EXIT_CODE}:0")
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    jobstate.write_cancel_marker(job_dir, by="gputrain cancel")
    registry = JobRegistry(tmp_path / "jobs.db")
    registry.add(JobRecord(job_id="5", backend="slurm", job_dir=str(job_dir), state="RUNNING"))
    backend = SlurmBackend(registry)
    monkeypatch.setattr(backend, "query", lambda job_id: parse_scontrol_job(line))
    status = backend.status("5")
    assert status.state == "CANCELLED"
    assert status.exit_code is None
    assert status.reason == "cancelled by the user"
