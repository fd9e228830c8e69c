"""``plan --compare`` compares the same work: every row trains the reference row's step."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputrain.cli.plan_output import _same_work, compare_rows
from gputrain.planner import make_plan
from tests.conftest import RECIPES


def _kwargs() -> dict[str, object]:
    return {"gpus_per_node": None, "nodes": None, "cluster": None, "overrides": [], "preset": None, "target": None}


@pytest.mark.slow
def test_gdpo_rows_all_train_the_b200_tables_1024_prompts(gputrain_home: Path) -> None:
    rows = [r for r in compare_rows(RECIPES / "gdpo_deepscaler.yaml", None, _kwargs()) if "error" not in r]
    assert len(rows) > 5
    assert {r["work_per_step"] for r in rows} == {"1024×8"}


def test_diffusion_rows_keep_the_global_batch_through_accumulation() -> None:
    recipe = RECIPES / "bd3lm_gsm8k.yaml"
    reference = make_plan(recipe, gpu="H200", check_memory=False)
    for gpu, gpus in (("A100-40GB", 4), ("RTX-4090", 2)):
        own = make_plan(recipe, gpu=gpu, gpus_per_node=gpus, check_memory=False)
        same = make_plan(recipe, gpu=gpu, gpus_per_node=gpus, check_memory=False,
                         overrides=_same_work(own, reference))
        assert same.global_batch_size == reference.global_batch_size == 512
        assert same.recipe.train.batch_size <= own.recipe.train.batch_size
