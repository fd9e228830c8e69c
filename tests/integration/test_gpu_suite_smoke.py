"""benchmarks/gpu_suite.py in smoke form on the CPU (tiny shapes, --gpu cpu), so the GPU suite cannot rot.

The same driver, plan parsing, benchmark and real ``gputrain run`` collection run on the GPU machine; here
each record must carry the planner's prediction beside the measurement.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_suite_smoke_writes_predicted_beside_measured(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_suite.py"), "--cpu", "--out", str(out),
                           "--steps", "bench_pre27,run_bd3lm_preset", "--budget", "400"],
                          capture_output=True, text=True, timeout=500, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = {r["step"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert recs["start"]["mode"] == "cpu-smoke"
    bench, run = recs["bench:pre27"], recs["run:bd3lm_preset"]
    assert bench["ok"] and bench["meas_step_s"] > 0 and bench["pred_step_s"] > 0
    assert bench["attention"] == "sdpa" and bench["resolved"]  # what "auto" resolves to on a CPU
    # the path before #27, beside which the GPU run measures the default: unpadded head, exact rows, no env
    assert (bench["head_vocab"], bench["head_rows"], bench["alloc_conf"]) == (258, "exact", None)
    assert run["ok"], run.get("error_tail")
    assert run["meas_step_s"] > 0 and run["pred_step_s"] > 0 and run["pred_mem_gib"] > 0
    assert run["metric_compile_seconds_median"] > 0  # the first step is timed as its own phase
    assert any("[runtime] kernels:" in x for x in run["runtime_lines"])
    assert "ratio_step" in (out / "summary.txt").read_text()
    assert (out / "side.json").is_file()
