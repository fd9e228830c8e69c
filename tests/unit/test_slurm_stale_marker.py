"""A requeued Slurm job that fails before its script runs is FAILED, not PREEMPTED (seen in CI, stop 37).

The first attempt checkpointed, wrote ``PREEMPTED`` and was requeued; the second was killed by slurmd at
launch ("Job credential revoked", exit 1, run time 0), so the job script never renamed the old marker.
`gputrain status` read that marker and said PREEMPTED for as long as anyone asked, `jobs` kept asking
scontrol about it, and the user never saw the failure.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gputrain.backends.slurm import SlurmBackend
from gputrain.backends.slurm_parse import parse_scontrol_job, start_epoch
from gputrain.contract import jobstate
from gputrain.registry.store import JobRecord, JobRegistry

RECORDED = Path(__file__).parent / "data" / "slurm" / "scontrol_failed.txt"
START = "2026-11-27T03:38:58"


def _backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker_age_s: float) -> SlurmBackend:
    # the recorded FAILED line, as the relaunch left it: second attempt, exit 1, started at START
    line = (RECORDED.read_text().replace("Restarts=0", "Restarts=1").replace("ExitCode=3:0", "ExitCode=1:0")
            .replace("StartTime=2026-11-21T13:50:29", f"StartTime={START}"))
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    marker = job_dir / jobstate.PREEMPTED_MARKER
    marker.write_text('{"step": 3, "signal": "SIGTERM"}\n')
    written = time.mktime(time.strptime(START, "%Y-%m-%dT%H:%M:%S")) + marker_age_s
    os.utime(marker, (written, written))
    registry = JobRegistry(tmp_path / "jobs.db")
    registry.add(JobRecord(job_id="3", backend="slurm", job_dir=str(job_dir), state="RUNNING"))
    backend = SlurmBackend(registry)
    monkeypatch.setattr(backend, "query", lambda job_id: parse_scontrol_job(line))
    return backend


def test_the_previous_attempts_preempted_marker_does_not_hide_a_launch_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    status = _backend(tmp_path, monkeypatch, marker_age_s=-0.8).status("3")  # written before this attempt
    assert status.state == "FAILED" and status.exit_code == 1, status
    assert status.restarts == 1


def test_this_attempts_marker_still_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    status = _backend(tmp_path, monkeypatch, marker_age_s=+40).status("3")  # written while it ran
    assert status.state == "PREEMPTED", status


def test_start_time_parses_and_unknown_is_none() -> None:
    assert start_epoch(START) == time.mktime(time.strptime(START, "%Y-%m-%dT%H:%M:%S"))
    assert start_epoch("Unknown") is None and start_epoch("") is None
    # the user's CANCELLED is the job's, not the attempt's: never dropped for its age
    assert jobstate.CANCELLED_MARKER not in jobstate.ATTEMPT_MARKERS
