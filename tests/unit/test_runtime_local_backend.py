"""Local backend job folders and records, and the tracking adapters (TensorBoard, W&B offline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputrain.backends.local import LocalBackend
from gputrain.contract.plan import load_job_plan
from gputrain.errors import GputrainError
from gputrain.registry.store import JobRegistry

REPO = Path(__file__).resolve().parents[2]


def _plan():
    from gputrain.planner import make_plan

    return make_plan(REPO / "recipes" / "gnn_coloring.yaml", gpu="cpu", gpus_per_node=2, nodes=1, target="local")


def test_prepare_writes_job_folder_and_pending_record(tmp_path: Path) -> None:
    registry = JobRegistry(tmp_path / "jobs.db")
    sub = LocalBackend(registry).prepare(_plan(), logs_dir=tmp_path / "logs")
    assert sub.job_id == "local-1"
    assert sub.job_dir.parent == tmp_path / "logs" and sub.job_dir.name.startswith("gnn_coloring_job_local-1_")
    assert sorted(p.name for p in sub.job_dir.iterdir()) == [
        "checkpoints",
        "launch.sh",
        "plan.json",
        "provenance.json",
        "recipe.resolved.yaml",
    ]
    plan = load_job_plan(sub.job_dir / "plan.json")
    assert plan.target == "local" and plan.world_size == 2 and plan.module == "gputrain.train.gnn_coloring"
    assert plan.artifacts["launch.sh"] == "launch.sh"
    assert "-m gputrain.train.gnn_coloring" in (sub.job_dir / "launch.sh").read_text()
    rec = registry.get("local-1")
    assert (rec.state, rec.job_dir, rec.name) == ("PENDING", str(sub.job_dir), sub.job_dir.name)
    assert not [p for p in (tmp_path / "logs").iterdir() if p.name.startswith(".staging")]


def test_unwritable_logs_dir_is_an_error_and_leaves_no_record(tmp_path: Path) -> None:
    registry = JobRegistry(tmp_path / "jobs.db")
    (tmp_path / "logs").write_text("a file, not a folder")
    with pytest.raises(GputrainError, match="cannot write job folder"):
        LocalBackend(registry).prepare(_plan(), logs_dir=tmp_path / "logs")
    assert registry.list() == []


def test_cancel_before_the_supervisor_starts_means_it_never_starts(tmp_path: Path) -> None:
    registry = JobRegistry(tmp_path / "jobs.db")
    backend = LocalBackend(registry)
    sub = backend.prepare(_plan(), logs_dir=tmp_path / "logs")
    marker = tmp_path / "started"
    (sub.job_dir / "launch.sh").write_text(f"#!/usr/bin/env bash\ntouch {marker}\n")
    assert backend.cancel(sub.job_id) == "CANCELLED"  # no pid yet: nothing has been launched
    assert registry.get(sub.job_id).state == "CANCELLED"
    assert (sub.job_dir / "CANCELLED").is_file()
    assert backend.run(sub) != 0
    assert not marker.exists(), "a cancelled job was started anyway"
    assert registry.get(sub.job_id).state == "CANCELLED"
    assert backend.cancel(sub.job_id) == "CANCELLED"  # a second cancel changes nothing


@pytest.mark.slow  # a real run with TensorBoard and W&B offline: 3-4 s
def test_tensorboard_and_wandb_offline_log_without_secret_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tensorboard")
    from gputrain.train.runtime.metrics import Metrics

    secret = "sk-test-0123456789abcdef"
    monkeypatch.setenv("MY_TOKEN", secret)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    from gputrain.recipe.schema import Recipe
    from tests.support.plans import toy_recipe

    recipe = Recipe.model_validate({
        **toy_recipe(),
        "secrets": ["MY_TOKEN"],
        "env": {"RECIPE_LEAK": f"prefix {secret}"},
        "tracking": {"tensorboard": True, "wandb": pytest.importorskip("wandb") is not None, "project": "t"},
    })
    metrics = Metrics(tmp_path, recipe, enabled=True)
    metrics.log(1, loss=1.5)
    metrics.log(2, loss=0.5)
    metrics.close()
    assert any(p.name.startswith("events.out.tfevents") for p in (tmp_path / "tensorboard").iterdir())
    assert "wandb offline" in metrics.notes
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), f"secret value written to {path}"
    assert [json.loads(x)["loss"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1.5, 0.5]
