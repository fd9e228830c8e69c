"""Slurm CLI commands that need no running Slurm: clusters, dry-run submit, jobs, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import gputrain as run_gputrain

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def run(tmp_path: Path):  # type: ignore[no-untyped-def]
    def _run(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "GPUTRAIN_HOME": str(tmp_path / "home"), "GPUTRAIN_CONFIG": str(tmp_path / "c.yaml")}
        if path is not None:
            env["PATH"] = path
        return run_gputrain(*args, cwd=tmp_path, env=env)
    return _run


def test_clusters_lists_builtins(run) -> None:  # type: ignore[no-untyped-def]
    out = run("clusters", "--json")
    names = [c["name"] for c in json.loads(out.stdout)]
    assert names == ["supercloud", "testbed"]
    text = run("clusters").stdout
    assert "--gres=gpu:volta:2" in text


def test_dry_run_writes_folder_without_slurm(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = run("submit", str(ROOT / "recipes" / "selftest.yaml"), "--cluster", "supercloud", "--nodes", "2",
              "--dry-run", "--json", path="/nonexistent")
    assert out.returncode == 0, out.stderr
    job_dir = Path(json.loads(out.stdout)["job_dir"])
    assert job_dir.parent == tmp_path / "logs" and job_dir.name.startswith("selftest_job_dryrun_")
    assert {"job.sbatch", "plan.json", "recipe.resolved.yaml", "checkpoints"} <= {p.name for p in job_dir.iterdir()}
    plan = json.loads((job_dir / "plan.json").read_text())
    assert plan["nodes"] == 2 and plan["cluster"]["name"] == "supercloud"
    assert json.loads(run("jobs", "--json").stdout) == []  # a dry run records nothing


def test_submit_without_sbatch_is_one_line_error(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = run("submit", "selftest", "--cluster", "testbed", path="/nonexistent")
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1].startswith("error: sbatch not found on PATH")
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").iterdir())


def test_submit_needs_a_cluster(run) -> None:  # type: ignore[no-untyped-def]
    out = run("submit", "selftest")
    assert out.returncode != 0 and "--cluster is required" in out.stderr and "supercloud" in out.stderr


def test_status_of_unknown_job_is_a_user_error_without_slurm(run) -> None:  # type: ignore[no-untyped-def]
    out = run("status", "123", path="/nonexistent")
    assert out.returncode == 2 and out.stderr.strip() == (
        "error: no job '123' known to gputrain (job id, name or folder; see `gputrain jobs`)")
