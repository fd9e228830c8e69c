"""The per-test timeline (``GPUTRAIN_TEST_TIMELINE``, tests/conftest.py) and its reader (benchmarks/ci_timeline.py):
what a CI rehearsal needs to say which worker's chain set the wall time (#26)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import conftest
from tests.support.benchmarks import load_benchmark


def _run_hook(nodeid: str, seconds: float) -> None:
    item = SimpleNamespace(nodeid=nodeid, path=Path(nodeid.split("::")[0]))
    steps = conftest.pytest_runtest_protocol(item)  # the hook wrapper's generator, driven as pluggy does
    next(steps)
    time.sleep(seconds)  # a test that waits: wall without CPU
    with pytest.raises(StopIteration):
        next(steps)


def test_each_test_is_one_line_with_its_worker_group_wall_and_cpu(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUTRAIN_TEST_TIMELINE", str(tmp_path))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")
    _run_hook("tests/integration/test_slurm_testbed.py::test_x", 0.2)
    _run_hook("tests/unit/test_y.py::test_y", 0.0)
    rows = [json.loads(line) for line in (tmp_path / "gw7.jsonl").read_text().splitlines()]
    assert [(r["test"].split("::")[1], r["worker"], r["group"]) for r in rows] == [
        ("test_x", "gw7", "slurm_testbed"), ("test_y", "gw7", "")]
    assert rows[0]["end"] - rows[0]["start"] >= 0.2 and 0 <= rows[0]["cpu"] < 0.2
    assert rows[1]["start"] >= rows[0]["end"]


def test_without_the_variable_nothing_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUTRAIN_TEST_TIMELINE", raising=False)
    monkeypatch.chdir(tmp_path)
    _run_hook("tests/unit/test_y.py::test_y", 0.0)
    assert list(tmp_path.iterdir()) == []


def test_the_report_puts_the_worker_that_ended_last_first_and_names_waiting_cpu_slot_tests(tmp_path: Path) -> None:
    timeline = load_benchmark("ci_timeline")
    rows = [
        {"test": "a.py::slurm", "worker": "gw0", "start": 0, "end": 700, "cpu": 20, "group": "slurm_testbed"},
        {"test": "b.py::train", "worker": "gw2", "start": 0, "end": 500, "cpu": 480, "group": ""},
        {"test": "c.py::sleeps", "worker": "gw2", "start": 500, "end": 900, "cpu": 3, "group": ""},
    ]
    (tmp_path / "gw.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = timeline.report(timeline.load(tmp_path), top=5)
    assert text.splitlines()[0].startswith("gw2: 2 tests, 0 -> 900 s")
    waiting = text.split("mostly waited")[1]
    assert "c.py::sleeps" in waiting and "b.py::train" not in waiting and "a.py::slurm" not in waiting
