"""`gputrain gpus --cluster` reads the real testbed's GRES from sinfo."""

from __future__ import annotations

import json

import pytest

from tests.conftest import require_tool
from tests.support.cli import gputrain as run_gputrain

pytestmark = pytest.mark.integration


def test_gpus_from_the_testbed_sinfo() -> None:
    require_tool("sinfo")
    proc = run_gputrain("gpus", "--cluster", "testbed", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {r["node"] for r in rows} == {"n1", "n2"}
    assert all(r["gres"] == "gpu:volta:2" and r["count"] == 2 for r in rows)
    assert all("V100-32GB" in r["canonical"] for r in rows)
