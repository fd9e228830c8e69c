"""The failure doctor: remedies computed from the job's own plan (the real planner) and measurements.

The OOM log is the torch caching allocator's message (tests/fixtures/logs/cuda_oom.log); the plans are made
by the real planner from bundled recipes, so the remedy is checked against the planner's own arithmetic:
the batch it proposes fits under the capacity the OOM reported (scaled by how far the plan was off), and one
more does not.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gputrain.doctor import prescribe, rerun_command
from gputrain.doctor.annotate import annotate
from gputrain.doctor.remedy import MEMORY_MARGIN, _predicted_memory, original_overrides
from gputrain.logs.summarize import summarize
from gputrain.planner import make_plan
from tests.conftest import RECIPES
from tests.support.cli import gputrain as run_gputrain

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def _job(tmp_path: Path, plan_kw: dict[str, Any], log: str, name: str = "job") -> Path:
    job = tmp_path / name
    job.mkdir()
    plan = make_plan(check_memory=False, **plan_kw)
    (job / "plan.json").write_text(plan.to_json())
    (job / "training_output.log").write_text(log)
    return job


def test_oom_remedy_is_the_largest_batch_the_scaled_memory_model_fits(tmp_path: Path) -> None:
    job = _job(tmp_path, {"recipe_path": RECIPES / "bd3lm_gsm8k.yaml", "gpu": "H100", "gpus_per_node": 2,
                          "overrides": ["train.batch_size=64", "train.grad_accum=2"]},
               (FIXTURES / "cuda_oom.log").read_text())
    summary = summarize(job, final=True, exit_code=1)
    assert summary["root_cause"]["kind"] == "cuda_oom"
    plan = json.loads((job / "plan.json").read_text())
    from gputrain.contract.plan import load_job_plan

    job_plan = load_job_plan(job / "plan.json")
    remedy = prescribe(summary, job_plan)
    assert remedy is not None and remedy.kind == "cuda_oom", remedy
    settings = dict(o.split("=", 1) for o in remedy.overrides)
    batch, accum = int(settings["train.batch_size"]), int(settings["train.grad_accum"])
    assert batch < 64 and batch * accum == 64 * 2  # the global batch is kept exactly
    capacity = 79.15  # from the OOM message, not the catalog
    needed = 77.90 + 2.00
    scale = max(1.0, needed / plan["estimate"]["memory_gib_per_gpu"])
    assert remedy.figures["model_scale"] == pytest.approx(scale, rel=1e-3)
    fits = _predicted_memory(job_plan, remedy.overrides)
    assert fits is not None and scale * fits <= MEMORY_MARGIN * capacity
    bigger = min(b for b in range(batch + 1, 65) if 128 % b == 0)  # the next batch that keeps the global one
    one_more = [f"train.batch_size={bigger}", f"train.grad_accum={128 // bigger}",
                *[o for o in remedy.overrides if o.startswith("train.gradient_checkpointing")]]
    more = _predicted_memory(job_plan, one_more)
    assert more is not None and scale * more > MEMORY_MARGIN * capacity, "not the largest batch that fits"


def test_fix_command_keeps_the_jobs_overrides_and_resumes(tmp_path: Path) -> None:
    job = _job(tmp_path, {"recipe_path": RECIPES / "bd3lm_gsm8k.yaml", "gpu": "H100", "gpus_per_node": 2,
                          "overrides": ["train.batch_size=64", "train.seed=7", "data.val_size=50"]},
               (FIXTURES / "cuda_oom.log").read_text())
    summary = summarize(job, final=True, exit_code=1)
    remedy = annotate(summary, job)
    assert remedy is not None
    from gputrain.contract.plan import load_job_plan

    plan = load_job_plan(job / "plan.json")
    assert set(original_overrides(plan)) == {"train.batch_size=64", "train.seed=7", "data.val_size=50"}
    words = shlex.split(rerun_command(plan, remedy, "local-9"))
    assert words[:3] == ["gputrain", "run", str(RECIPES / "bd3lm_gsm8k.yaml")]
    sets = [words[i + 1] for i, w in enumerate(words) if w == "--set"]
    assert "train.seed=7" in sets and "data.val_size=50" in sets and "train.batch_size=64" not in sets
    assert any(s.startswith("train.batch_size=") for s in sets)
    assert words[-2:] == ["--resume-from", "local-9"]
    written = json.loads((job / "summary.json").read_text())  # the remedy is in the files a person reads
    assert written["root_cause"]["remedy"]["overrides"] == remedy.overrides
    assert "fix " in (job / "job_summary.txt").read_text()


def test_timeout_remedy_uses_the_measured_step_rate(tmp_path: Path) -> None:
    job = _job(tmp_path, {"recipe_path": RECIPES / "grpo_code_mbpp.yaml", "gpu": "V100", "gpus_per_node": 2,
                          "cluster": "supercloud", "target": "slurm"}, "[gputrain] started\n")
    start = 1_700_000_000.0
    with open(job / "metrics.jsonl", "w") as fh:  # 100 steps in 1000 s: 360 steps per hour
        for step in range(1, 101):
            fh.write(json.dumps({"step": step, "loss": 1.0 / step, "time": start + 10 * step}) + "\n")
    summary = summarize(job, final=True, exit_code=1, state="TIMEOUT")
    assert summary["root_cause"]["kind"] == "time_limit", summary["root_cause"]
    from gputrain.contract.plan import load_job_plan

    plan = load_job_plan(job / "plan.json")
    summary["steps"] = {"done": 100, "planned": 1000}
    summary["steps_per_hour"] = 360.0
    remedy = prescribe(summary, plan)
    assert remedy is not None and remedy.kind == "time_limit"
    # 900 steps at 360/h = 2.5 h, +20 % = 3 h (whole quarter hours), under SuperCloud's maximum
    assert remedy.overrides == ["resources.time=03:00:00"], remedy
    summary["steps"] = {"done": 100, "planned": 100_000}
    long = prescribe(summary, plan)
    assert long is not None and long.figures["jobs"] > 1 and long.overrides[0].startswith("resources.time=")


def test_nothing_to_fix_for_a_completed_job(tmp_path: Path) -> None:
    job = _job(tmp_path, {"recipe_path": RECIPES / "gnn_coloring.yaml", "gpu": "cpu", "gpus_per_node": 1},
               "step 1 | loss 1.0\n")
    assert prescribe(summarize(job, final=True, exit_code=0), None) is None


def test_logs_fix_cli_prints_the_command_and_json(tmp_path: Path) -> None:
    job = _job(tmp_path, {"recipe_path": RECIPES / "bd3lm_gsm8k.yaml", "gpu": "H100", "gpus_per_node": 2},
               (FIXTURES / "cuda_oom.log").read_text())
    env = {"GPUTRAIN_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    text = run_gputrain("logs", str(job), "--fix", env=env)
    assert text.returncode == 0, text.stderr
    assert "fix: CUDA out of memory" in text.stdout and "--resume-from" in text.stdout
    out = run_gputrain("logs", str(job), "--fix", "--json", env=env)
    data = json.loads(out.stdout)
    assert data["remedy"]["kind"] == "cuda_oom" and data["command"].startswith("gputrain run ")
    log_only = run_gputrain("logs", str(job / "training_output.log"), "--fix", env=env)
    # a bare log file is no longer refused (#30): the remedy from its cause alone, and no rerun command
    assert log_only.returncode == 0 and "fix: CUDA out of memory" in log_only.stdout
    assert "--resume-from" not in log_only.stdout and "a log file, not a job" in log_only.stdout


def test_resume_from_refuses_a_job_without_checkpoint(tmp_path: Path) -> None:
    empty = tmp_path / "empty_job"
    empty.mkdir()
    env = {"GPUTRAIN_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "gputrain", "run", "selftest", "--gpu", "cpu", "--gpus", "1",
                           "--logs-dir", str(tmp_path / "logs"), "--resume-from", str(empty)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 2 and "no complete checkpoint" in proc.stderr
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").iterdir())  # nothing half-written


def test_checkpoint_layout_matches_the_runtime() -> None:
    import inspect

    from gputrain.backends import resume
    from gputrain.train.runtime import checkpoint, context

    assert checkpoint._PREFIX == resume.CHECKPOINT_PREFIX
    assert f'job_dir / "{resume.CHECKPOINTS_DIR}"' in inspect.getsource(context)
