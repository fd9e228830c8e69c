"""What a newcomer reads in the first hour carries no noise (#31 point 16): no "0% MFU" for an assumed small
MFU, no "1 GPUs", a usage error in one line, a "--set" error without a fake position, no "best" for a
diagnostic."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gputrain.cli.plan_output import percent
from gputrain.logs.catalog import metric_info
from tests.support.cli import gputrain as run_gputrain


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUTRAIN_HOME": str(tmp_path / "home"), "GPUTRAIN_CONFIG": str(tmp_path / "c.yaml"),
           "NO_COLOR": "1"}
    return run_gputrain(*args, env=env)


def test_a_bad_option_value_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "plan", "gnn_coloring", "--gpu", "cpu", "--gpus", "0")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--gpus" in lines[0], proc.stderr
    assert "gputrain plan -h" in lines[0] and "Traceback" not in proc.stderr


def test_set_error_has_no_fake_position_and_suggests_the_full_key(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "plan", "gnn_coloring", "--gpu", "cpu", "--set", "train.batchsize=64")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: --set train.batchsize=64: unknown key 'train.batchsize'; "
                                   "did you mean 'train.batch_size'?")


def test_plan_shows_a_small_mfu_and_one_gpu_in_the_singular(tmp_path: Path) -> None:
    gnn = _cli(tmp_path, "plan", "gnn_coloring", "--gpu", "H100")
    assert gnn.returncode == 0, gnn.stderr
    assert "compute at 0.2% MFU" in gnn.stdout and "at 0% MFU" not in gnn.stdout
    one = _cli(tmp_path, "plan", "selftest", "--gpu", "cpu", "--gpus", "1")
    assert "(1 GPU × " in one.stdout and "1 GPUs" not in one.stdout


def test_percent_keeps_the_first_digit_of_a_small_share() -> None:
    assert (percent(0.38), percent(0.002), percent(0.0), percent(1.0)) == ("38%", "0.2%", "0%", "100%")


def test_a_reward_diagnostic_has_no_best() -> None:
    assert metric_info("rewards/correct/frac_zero_std").better is None
    assert metric_info("rewards/correct/mean").better == "higher"


def test_a_run_shorter_than_its_log_stamps_shows_one_duration(tmp_path: Path) -> None:
    """#31: "(0m00s)" beside "elapsed 0:00:01": the time row now takes the job's own wall time too."""
    from gputrain.doctor.annotate import annotate
    from gputrain.logs.report import overview_rows
    from gputrain.planner import make_plan
    from tests.conftest import RECIPES

    (tmp_path / "plan.json").write_text(make_plan(RECIPES / "selftest.yaml", gpu="cpu", gpus_per_node=2).to_json())
    (tmp_path / "perf.json").write_text('{"wall_seconds": 1.4, "cpu_seconds": 1.0, "host_rss_gib": 0.2}')
    summary = {"state": "COMPLETED", "start": "a", "end": "b", "duration_s": 0, "steps": {"done": 1, "planned": 1},
               "cost": {}, "root_cause": None}
    annotate(summary, tmp_path, write=False)
    rows = dict(overview_rows(summary))
    assert rows["time"].endswith("(0m01s)") and rows["efficiency"].startswith("elapsed 0:00:01")


def test_a_run_without_wandb_is_not_warned_about_its_key() -> None:
    """#31: "secret WANDB_API_KEY is not set" on CPU toy runs that do not log to W&B."""
    from gputrain.planner import make_plan
    from gputrain.render import render_artifacts
    from tests.conftest import RECIPES

    quiet = render_artifacts(make_plan(RECIPES / "bd3lm_gsm8k.yaml", gpu="cpu", gpus_per_node=2))["launch.sh"]
    assert "WANDB_API_KEY" not in quiet
    logged = make_plan(RECIPES / "bd3lm_gsm8k.yaml", gpu="cpu", gpus_per_node=2, overrides=["tracking.wandb=true"])
    assert "secret WANDB_API_KEY is not set" in render_artifacts(logged)["launch.sh"]


def test_a_run_that_downloads_nothing_is_not_warned_about_hf_token() -> None:
    """#31: "secret HF_TOKEN is not set" on CPU toy runs of the RL recipes (tiny built-in model, no hub data)."""
    from gputrain.planner import make_plan
    from gputrain.render import render_artifacts
    from tests.conftest import RECIPES

    toy = make_plan(RECIPES / "grpo_math_fsdp.yaml", gpu="cpu", gpus_per_node=2)
    assert "HF_TOKEN" not in render_artifacts(toy)["launch.sh"]
    hub = make_plan(RECIPES / "grpo_math_fsdp.yaml", gpu="cpu", gpus_per_node=2,
                    overrides=["model.name=Qwen/Qwen2.5-0.5B-Instruct"])
    assert "secret HF_TOKEN is not set" in render_artifacts(hub)["launch.sh"]
