"""Error of the plan before and after calibration from a GPU run: the H200 sheet's bd3lm_gsm8k runs.

A job folder as ``gputrain run bd3lm_gsm8k --gpu H200 --gpus 1`` leaves it (plan.json + perf.json with the
sheet's measured figures) is registered in a private GPUTRAIN_HOME; every sheet row is then planned without and
with calibration. Prints a markdown table (benchmarks/RESULTS.md keeps one).

    python benchmarks/planner_calibration.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHEET = json.loads((ROOT / "tests" / "unit" / "data" / "reference" / "gpu_h200_2026_11_26.json").read_text())
RECIPE = ROOT / "recipes" / "bd3lm_gsm8k.yaml"


def main() -> int:
    with tempfile.TemporaryDirectory() as home:
        os.environ["GPUTRAIN_HOME"] = home
        from gputrain.contract.perf import MeasuredPerf
        from gputrain.planner import make_plan
        from gputrain.registry.store import JobRecord, JobRegistry

        first = SHEET["bd3lm_gsm8k_runs"][0]
        plan = make_plan(RECIPE, gpu="H200", gpus_per_node=1, check_memory=False)
        job = Path(home) / "job"
        job.mkdir()
        (job / "plan.json").write_text(plan.to_json())
        (job / "perf.json").write_text(MeasuredPerf(
            step_seconds=first["measured_step_s"], peak_memory_gib=first["measured_peak_gib"],
            peak_memory_kind="cuda_max_allocated", world_size=1).model_dump_json())
        JobRegistry().add(JobRecord(job_id="1", backend="local", job_dir=str(job), state="COMPLETED"))
        print("| sheet row (H200) | measured step | before | after | error before → after | measured GiB "
              "(+1 context) | before | after |")
        print("|---|---|---|---|---|---|---|---|")
        for row in SHEET["bd3lm_gsm8k_runs"]:
            sets = [f"train.batch_size={row['batch_size']}", f"train.grad_accum={row['grad_accum']}"]
            b = make_plan(RECIPE, gpu="H200", gpus_per_node=1, overrides=sets, check_memory=False).estimate
            a = make_plan(RECIPE, gpu="H200", gpus_per_node=1, overrides=sets, check_memory=False,
                          calibrate=True).estimate
            m, mem = row["measured_step_s"], row["measured_peak_gib"] + 1.0
            assert b.step_seconds and a.step_seconds and b.memory_gib_per_gpu and a.memory_gib_per_gpu
            how = a.calibration.match if a.calibration else "none"
            print(f"| {row['batch_size']} × accum {row['grad_accum']} ({how}) | {m:.3g} s | {b.step_seconds:.3g} s | "
                  f"{a.step_seconds:.3g} s | {b.step_seconds / m - 1:+.0%} → {a.step_seconds / m - 1:+.0%} | "
                  f"{mem:.1f} | {b.memory_gib_per_gpu:.1f} | {a.memory_gib_per_gpu:.1f} |")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
