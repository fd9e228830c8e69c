"""The suites that share one outside service really run on one xdist worker (``tests/conftest.py``).

xdist's own ``xdist_group`` marks stopped grouping anything under pytest 9.2 (xdist renames ``item._nodeid``,
which pytest no longer reads), and nothing failed: the Slurm testbed's suites ran on two workers at once and
flaked. This runs a real ``pytest -n 2 --dist loadgroup`` over a serial group's module plus another and checks
which worker ran what.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a pytest with two xdist workers: ~10 s
def test_a_serial_group_runs_on_one_worker() -> None:
    pytest.importorskip("xdist")
    group_module = "tests/security/test_sandbox_level_choice.py"  # SERIAL_GROUPS["sandbox"]
    other = "tests/unit/test_progress.py"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v",
                           "-p", "no:cacheprovider", group_module, other],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    ran = re.findall(r"^\[(gw\d)\] \[ *\d+%\] \w+ (\S+)::", proc.stdout, re.MULTILINE)
    workers = {worker for worker, path in ran if path == group_module}
    assert len([1 for _, path in ran if path == group_module]) >= 3
    assert len(workers) == 1, ran
