"""Failures of the world exit 1, through the installed ``gputrain``: a Slurm controller that does not answer
(the testbed's real configuration pointed at a closed port) and a job that fails (a real torchrun run).
The user-error half of the table is ``tests/unit/test_cli_conventions.py``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import RECIPES, gputrain_command, require_tool

pytestmark = pytest.mark.integration


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "GPUTRAIN_HOME": str(tmp_path / "home"), "GPUTRAIN_CONFIG": str(tmp_path / "c.yaml"),
            "OMP_NUM_THREADS": "1", **extra}


@pytest.fixture
def unreachable_slurm(tmp_path: Path) -> Path:
    """A copy of the testbed's slurm.conf whose controller port nothing listens on."""
    require_tool("sinfo")
    conf = Path(os.environ.get("GPUTRAIN_TESTBED_DIR", "/tmp/gputrain-slurm")) / "etc" / "slurm.conf"
    if not conf.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{conf} missing: run scripts/slurm-testbed up")
        pytest.skip(f"{conf} missing (scripts/slurm-testbed up)")
    # MessageTimeout: the client retries a refused controller for about this long per command; the testbed's
    # 30 s (kept for its loaded nodes) would make this test wait a minute for the same exit code.
    replace = {"SlurmctldPort": "SlurmctldPort=1", "MessageTimeout": "MessageTimeout=3"}
    bad = tmp_path / "slurm.conf"
    bad.write_text("".join(replace.get(line.split("=", 1)[0], line) + "\n" for line in conf.read_text().splitlines()))
    return bad


@pytest.mark.slow  # Slurm's client retries a refused controller for MessageTimeout (3 s here) per command
def test_unreachable_controller_exits_1(unreachable_slurm: Path, tmp_path: Path) -> None:
    args = ["gpus", "--cluster", "testbed"]  # `submit` to it: tests/integration/test_slurm_testbed.py
    env = _env(tmp_path, SLURM_CONF=str(unreachable_slurm))
    text = subprocess.run([*gputrain_command(), *args], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert text.returncode == 1, text.stderr
    assert text.stderr.startswith("error: ") and len(text.stderr.strip().splitlines()) == 1, text.stderr
    as_json = subprocess.run([*gputrain_command(), *args, "--json"], env=env, cwd=tmp_path, capture_output=True,
                             text=True, timeout=300)
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["error"]["exit_code"] == 1


def test_a_failed_job_exits_1_and_names_its_own_exit_code(tmp_path: Path) -> None:
    """With --json (#31): one object on stdout naming the job, its state and exit code, the error in it; the
    training's output on stderr. ("slurm node None" on the hello world: tests/integration/test_first_hour.py.)"""
    require_tool("bash")
    proc = subprocess.run([*gputrain_command(), "run", str(RECIPES / "selftest.yaml"), "--gpu", "cpu", "--gpus", "1",
                           "--set", "algorithm.fail=true", "--logs-dir", str(tmp_path / "logs"), "--json"],
                          env=_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-2000:]
    job = json.loads(proc.stdout)  # the whole of stdout: one object
    assert (job["job_id"], job["state"], job["exit_code"]) == ("local-1", "FAILED", 1), job
    assert job["error"]["message"].startswith("job local-1 FAILED (exit code 1); folder "), job
    assert job["error"]["exit_code"] == 1 and Path(job["job_dir"], "job_summary.txt").is_file()
    assert "selftest failing on purpose" in proc.stderr  # the training's own output, moved off stdout
