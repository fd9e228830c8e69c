"""docs/first-hour.md is what a newcomer's first hour prints today (#31): ``scripts/first_hour.py --check``
runs every step for real (plan, dry-run submit, the CPU hello world, a detached job, its cancel, jobs, logs,
summaries) and fails on any drift. The same run holds the noise out of the first hour: no escape sequence
(stderr is not a terminal), no traceback, no "slurm node None", no secret warning, no torchvision lines."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_first_hour_page_is_what_the_commands_print_now() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "first_hour.py"), "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    page = (ROOT / "docs" / "first-hour.md").read_text()
    for noise in ("\x1b", "Traceback", "slurm node", "is not set", "torchvision", "FutureWarning"):
        assert noise not in page, noise
    assert "selftest  COMPLETED (exit 0)" in page and "CANCELLED — cancelled by the user" in page
