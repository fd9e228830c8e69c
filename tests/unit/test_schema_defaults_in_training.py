"""Trainers take their defaults from the recipe schema: a recipe silent on a setting trains with the schema's
value (they used to fall back to their own: keep_checkpoints 2 instead of 3, lr_schedule "constant" instead
of "cosine" in the GRPO core)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gputrain.train.runtime import setup_run  # noqa: E402
from tests.support.plans import toy_recipe, write_plan  # noqa: E402


@pytest.fixture(autouse=True)
def _single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "GPUTRAIN_JOB_DIR"):
        monkeypatch.delenv(name, raising=False)


def test_a_run_keeps_the_schemas_three_checkpoints(tmp_path: Path) -> None:
    ctx = setup_run(["--plan", str(write_plan(tmp_path, toy_recipe(), gpus=1))])
    try:
        for step in range(1, 6):
            ctx.checkpoints.save(step, {"step": step})
    finally:
        ctx.close()
    kept = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith("step_"))
    assert kept == ["step_00000003", "step_00000004", "step_00000005"]


@pytest.mark.slow
def test_grpo_follows_the_schemas_cosine_schedule(tmp_path: Path) -> None:
    from gputrain.train.grpo_math import train

    recipe = {
        "name": "grpo-defaults", "entrypoint": "grpo_math",
        "model": {"name": "tiny-qwen2", "hidden_size": 16, "num_layers": 1, "num_heads": 2, "vocab_size": 128},
        "data": {"source": "generated", "train_size": 16},
        "train": {"batch_size": 4, "max_steps": 4, "learning_rate": 1e-3, "log_every": 1},
        "algorithm": {"num_generations": 2, "max_prompt_length": 32, "max_completion_length": 4,
                      "eval_samples": 0, "beta": 0.0},
        "distributed": {"strategy": "none", "backend": "gloo"},
    }
    ctx = setup_run(["--plan", str(write_plan(tmp_path, recipe, gpus=1))])
    try:
        assert train(ctx) == 0
    finally:
        ctx.close()
    lrs = [r["lr"] for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines()) if "lr" in r]
    assert len(lrs) == 4
    assert all(a > b for a, b in itertools.pairwise(lrs)), lrs  # cosine decays; constant would not
