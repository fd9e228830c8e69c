"""After a real CPU run, ``gputrain plan`` of the same recipe and hardware shows and uses the measurement.

``gputrain run gnn_coloring --gpu cpu --gpus 2`` (real torchrun, 2 gloo ranks, the shipped ``cpu`` profile;
the run the GNN end-to-end test reads, ``tests/integration/conftest.py``) writes ``perf.json``; the plan then
finds the run by its cost fingerprint and predicts its measured step time.
"""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import GNN_RECIPE, GnnRun
from tests.integration.conftest import gputrain as _gputrain

pytest.importorskip("torch")
pytestmark = pytest.mark.integration


def test_plan_uses_the_measured_cpu_run(gnn_cpu_run: GnnRun) -> None:
    # the GNN end-to-end test's run (tests/integration/conftest.py), with the plan taken just before it
    tmp_path, recipe, run, before = gnn_cpu_run.tmp, GNN_RECIPE, gnn_cpu_run.proc, gnn_cpu_run.plan_before
    assert before["estimate"]["calibration"] is None
    assert run.returncode == 0, run.stderr[-2000:]
    job_dir = next((tmp_path / "logs").iterdir())
    perf = json.loads((job_dir / "perf.json").read_text())
    assert perf["step_seconds"] > 0 and perf["peak_memory_kind"] == "rss" and perf["peak_memory_gib"] > 0.1
    metrics = [json.loads(line) for line in (job_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("perf/step_seconds" in m for m in metrics)
    # what the two ranks used, summed: the efficiency report's usage where Slurm has no accounting
    assert perf["cpu_seconds"] > 0 and perf["host_rss_gib"] >= perf["peak_memory_gib"]
    shown = json.loads(_gputrain(tmp_path, "logs", str(job_dir), "--json").stdout)["efficiency"]
    assert shown["source"] == "job (perf.json)" and shown["cpu_seconds"] == perf["cpu_seconds"]
    per_rank = json.loads((job_dir / "plan.json").read_text())["recipe"]["resources"]["cpus_per_gpu"]
    assert shown["cpus"] == 2 * per_rank and shown["gpu_hours"] == 0  # 2 ranks; CPU ranks are no GPUs
    assert 0 < shown["cpu_efficiency"] == pytest.approx(
        perf["cpu_seconds"] / (shown["cpus"] * shown["elapsed_s"]), rel=0.01)
    assert shown["memory_peak_gib"] == perf["host_rss_gib"] and shown["memory_gib"] == 8  # the profile's 8 GB
    assert "efficiency" in _gputrain(tmp_path, "logs", str(job_dir), "--summary").stdout

    after = json.loads(_gputrain(tmp_path, "plan", recipe, "--gpu", "cpu", "--gpus", "2", "--json").stdout)
    cal = after["estimate"]["calibration"]
    assert cal is not None and cal["match"] == "exact" and cal["job"].startswith("local:")
    assert after["estimate"]["step_seconds"] == pytest.approx(perf["step_seconds"], rel=0.15)
    assert cal["predicted_step_seconds"] == pytest.approx(before["estimate"]["step_seconds"])
    text = _gputrain(tmp_path, "plan", recipe, "--gpu", "cpu", "--gpus", "2").stdout
    assert "measured (exact)" in text and "predicted" in text

    # a near run (other batch) corrects the model by the measured/modelled ratio of that run
    near = json.loads(_gputrain(tmp_path, "plan", recipe, "--gpu", "cpu", "--gpus", "2",
                                "--set", "train.batch_size=32", "--json").stdout)["estimate"]
    assert near["calibration"]["match"] == "near"
    assert near["step_seconds"] == pytest.approx(near["calibration"]["predicted_step_seconds"]
                                                 * near["calibration"]["factor"])
