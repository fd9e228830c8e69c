"""The job script's own messages after the training, each on a line of its own (#30).

The rendered script runs under bash with stand-ins for the two programs it calls at its end: a "python" that
plays the launcher (it prints a progress bar cut off without a newline, as a killed tqdm does, and exits with
the code under test) and an ``scontrol`` that fails the way Slurm's does for a job that already ended, its
message without a trailing newline. Output goes where Slurm puts it, ``training_output.log`` opened for append.
A message glued to another line ("[gputrain] cancelled: not requeueingJob has already finished") is what
``gputrain logs`` and a person reading the log then see.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from gputrain.contract import jobstate
from gputrain.planner import make_plan
from gputrain.render.sbatch import SbatchInputs, render_sbatch

ROOT = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/bin/bash
case "$*" in
  *torch.distributed.run*) [ -z "$FAKE_MARKER" ] || echo '{}' >"$GPUTRAIN_JOB_DIR/$FAKE_MARKER"
    printf '  45%%|####      | 45/100 [00:09<00:11, 4.9it/s]'; exit "$FAKE_RC" ;;
  *) exit 0 ;;  # the final `gputrain logs --summary`: not under test here
esac
"""
FAKE_SCONTROL = """#!/bin/bash
[ "$1" = requeue ] && { printf 'Job has already finished for job %s' "$2" >&2; exit 1; }
exit 0
"""


def _run(tmp_path: Path, rc: int, marker: str = "") -> list[str]:
    """Run the script; the launcher writes ``marker`` into the job folder (as the SIGTERM trap does)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("python", FAKE_PYTHON), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    plan = make_plan(ROOT / "recipes" / "selftest.yaml", cluster="testbed", gpu="cpu", gpus_per_node=1)
    script = tmp_path / "job.sbatch"
    script.write_text(render_sbatch(plan, SbatchInputs(logs_dir=str(tmp_path), workdir=str(tmp_path),
                                                       stamp="x", python=str(bin_dir / "python"),
                                                       job_dir=str(job_dir))))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_RC": str(rc), "SLURM_JOB_ID": "31",
           "SLURM_JOB_NODELIST": "n1", "SLURM_RESTART_COUNT": "0", "FAKE_MARKER": marker}
    log = job_dir / "training_output.log"
    with log.open("ab") as out:
        subprocess.run(["bash", str(script)], stdout=out, stderr=out, env=env, cwd=tmp_path, timeout=60)
    return log.read_text().splitlines()


@pytest.fixture(autouse=True)
def _no_user_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUTRAIN_CONFIG", str(tmp_path / "none.yaml"))


def _messages_start_lines(lines: list[str]) -> None:
    for line in lines:
        assert "[gputrain]" not in line or line.startswith("[gputrain]"), lines
        assert not re.search(r"requeueing\S|finished\S*\[gputrain\]", line), lines


def test_a_failed_requeue_and_slurms_reason_are_lines_of_their_own(tmp_path: Path) -> None:
    lines = _run(tmp_path, jobstate.REQUEUE_EXIT_CODE)
    _messages_start_lines(lines)
    assert any(line.startswith("[gputrain] job 31 training exited with 75") for line in lines), lines
    assert any(line.startswith("[gputrain] preemption: requeueing (restart 1") for line in lines), lines
    failed = [line for line in lines if line.startswith("[gputrain] scontrol requeue failed")]
    assert failed and "Job has already finished for job 31" in failed[0], lines


def test_cancelled_after_a_cut_off_progress_bar_is_a_line_of_its_own(tmp_path: Path) -> None:
    lines = _run(tmp_path, 143, marker=jobstate.CANCELLED_MARKER)
    _messages_start_lines(lines)
    assert "[gputrain] cancelled: not requeueing" in lines, lines
