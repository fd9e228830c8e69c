"""Ctrl-C on a foreground ``gputrain run`` (#31.3): exit 130, one CANCELLED marker, a summary that reads as a
cancel. Real torchrun with 2 gloo ranks, stopped in the middle of its training loop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_ctrl_c_of_a_foreground_run_cancels_it_and_exits_130(tmp_path: Path) -> None:
    env = {**os.environ, "GPUTRAIN_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    args = ["run", "selftest", "--gpu", "cpu", "--gpus", "2", "--set", "train.max_steps=100000",
            "--set", "algorithm.sleep_seconds=100000"]
    proc = subprocess.Popen([sys.executable, "-m", "gputrain.cli.main", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not list((tmp_path / "logs").glob("*/checkpoints/step_*/meta.json")):  # inside the loop
            assert proc.poll() is None and time.monotonic() < deadline, "the run never reached its first step"
            time.sleep(0.3)
        proc.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C sends gputrain (torchrun has its own session)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    job = next((tmp_path / "logs").glob("selftest_job_local-1_*"))
    assert sorted(p.name for p in job.iterdir() if p.name.isupper()) == ["CANCELLED"]
    text = (job / "job_summary.txt").read_text()
    assert text.startswith("selftest  CANCELLED — cancelled by the user (SIGINT)"), text
    for crash in ("exited with code", "non-zero exit code", "traceback", "SignalException", "fix "):
        assert crash not in text, text
    assert "Traceback" not in err and "cancelled by the user (SIGINT)" in out  # the summary, printed
