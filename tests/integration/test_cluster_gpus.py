"""`gputrain gpus --cluster` reads the real testbed's GRES from sinfo."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import require_tool

pytestmark = pytest.mark.integration


def test_gpus_from_the_testbed_sinfo() -> None:
    require_tool("sinfo")
    proc = subprocess.run([sys.executable, "-m", "gputrain.cli.main", "gpus", "--cluster", "testbed", "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {r["node"] for r in rows} == {"n1", "n2"}
    assert all(r["gres"] == "gpu:volta:2" and r["count"] == 2 for r in rows)
    assert all("V100-32GB" in r["canonical"] for r in rows)
