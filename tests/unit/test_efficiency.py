"""The efficiency report (like ``seff``): Slurm accounting parsed, the allocation from the job's shape.

The sacct lines are in the layout ``sacct -P -n --format JobID,State,Elapsed,TotalCPU,AllocCPUS,MaxRSS,
ReqMem,NNodes`` prints for a 2-node job (the allocation line, then its ``batch``, ``extern`` and ``0``
steps; TotalCPU without hours under an hour, MaxRSS with a unit suffix).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputrain.backends.slurm_accounting import parse_sacct, slurm_bytes, slurm_seconds
from gputrain.doctor.efficiency import efficiency
from gputrain.logs.report import efficiency_line
from gputrain.planner import make_plan
from tests.conftest import RECIPES

SACCT = """4242|COMPLETED|00:10:05|00:31:02.123|16||64G|2
4242.batch|COMPLETED|00:10:05|00:01.500|8|5120K||1
4242.extern|COMPLETED|00:10:05|00:00.002|16|1024K||2
4242.0|COMPLETED|00:10:00|30:20.621|16|2.5G||2
4243|RUNNING|00:01:00|00:00:00|8||8G|1
"""


@pytest.mark.parametrize(("text", "seconds"), [("00:10:05", 605), ("1-02:03:04", 93784), ("30:20.621", 1820.621),
                                               ("00:00.002", 0.002)])
def test_slurm_durations(text: str, seconds: float) -> None:
    assert slurm_seconds(text) == pytest.approx(seconds)


def test_sacct_usage_sums_cpu_over_steps_and_takes_the_largest_task_rss() -> None:
    usage = parse_sacct(SACCT, "4242")
    assert usage is not None
    assert usage.elapsed_s == 605 and usage.alloc_cpus == 16
    assert usage.cpu_s == pytest.approx(1.5 + 0.002 + 1820.621)  # not the allocation line's total again
    assert usage.max_rss_gib == pytest.approx(2.5)
    assert slurm_bytes("5120K") == 5120 * 1024 and slurm_bytes("") is None
    assert parse_sacct(SACCT, "99") is None
    assert parse_sacct(SACCT, "4243") is None  # still running (the job's own final summary): not final totals


def test_report_uses_the_job_shape_and_sacct(tmp_path: Path) -> None:
    plan = make_plan(RECIPES / "gnn_coloring.yaml", gpu="V100-32GB", gpus_per_node=2, nodes=2, cluster="supercloud",
                     check_memory=False)
    (tmp_path / "plan.json").write_text(plan.to_json())
    summary = {"state": "COMPLETED", "duration_s": 600.0}
    report = efficiency(summary, tmp_path, plan, parse_sacct(SACCT, "4242"))
    assert report is not None and report["source"] == "sacct"
    assert report["cpus"] == 16 and report["elapsed_s"] == 605
    assert report["cpu_efficiency"] == pytest.approx((1.5 + 0.002 + 1820.621) / (16 * 605), abs=1e-4)
    assert report["gpu_hours"] == pytest.approx(4 * 605 / 3600, abs=1e-4)  # 2 nodes x 2 V100
    assert report["time_limit_s"] is not None and report["time_used"] == pytest.approx(605 / report["time_limit_s"],
                                                                                      abs=1e-4)
    line = efficiency_line(report)
    assert line.startswith("elapsed 0:10:05 (") and "CPU 19 % of 16 cores" in line and line.endswith("[sacct]")


def test_report_falls_back_to_the_jobs_own_measurement_and_waits_for_the_end(tmp_path: Path) -> None:
    plan = make_plan(RECIPES / "gnn_coloring.yaml", gpu="cpu", gpus_per_node=2)
    (tmp_path / "perf.json").write_text(json.dumps({"cpu_seconds": 30.0, "host_rss_gib": 2.0, "wall_seconds": 20.0}))
    assert efficiency({"state": "RUNNING", "duration_s": 10.0}, tmp_path, plan) is None
    report = efficiency({"state": "FAILED", "duration_s": 25.0}, tmp_path, plan)
    assert report is not None and report["source"] == "job (perf.json)"
    cpus = 2 * plan.recipe.resources.cpus_per_gpu
    assert report["cpu_efficiency"] == pytest.approx(30.0 / (cpus * 25.0), abs=1e-4)
    assert report["memory_efficiency"] == pytest.approx(2.0 / 8, abs=1e-4) and report["gpu_hours"] == 0
