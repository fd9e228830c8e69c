"""``provenance.json``: what a job ran with (versions, git commit, CUDA, driver), and what changed since the
previous job of the same recipe (#31 point 15)."""

from __future__ import annotations

import json
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
import torch

from gputrain.backends.local import LocalBackend
from gputrain.contract.provenance import PROVENANCE_FILE, changes
from gputrain.doctor.provenance import changed_since_previous
from gputrain.logs.report import overview_rows
from gputrain.registry.store import JobRegistry
from gputrain.train.runtime.provenance import record_runtime

REPO = Path(__file__).resolve().parents[2]


def _plan():
    from gputrain.planner import make_plan

    return make_plan(REPO / "recipes" / "gnn_coloring.yaml", gpu="cpu", gpus_per_node=2, nodes=1, target="local")


def _git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _user_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "user-code"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "train.py").write_text("print(1)\n")
    _git(repo, "add", "train.py")
    _git(repo, "commit", "-q", "-m", "one")
    return repo


def test_job_folder_records_versions_and_the_users_git_commit(tmp_path: Path, gputrain_home: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _user_repo(tmp_path)
    (repo / "train.py").write_text("print(2)\n")  # a tracked change not committed: dirty
    monkeypatch.chdir(repo)
    sub = LocalBackend(JobRegistry()).prepare(_plan(), logs_dir=tmp_path / "logs")
    launch = json.loads((sub.job_dir / PROVENANCE_FILE).read_text())["launch"]
    assert launch["git"] == {"commit": _git(repo, "rev-parse", "HEAD"), "dirty": True}
    assert launch["libraries"]["torch"] == metadata.version("torch")
    assert launch["libraries"]["gputrain"] == metadata.version("gputrain")
    assert launch["libraries"]["trl"] == metadata.version("trl")


def test_outside_a_git_repo_the_commit_is_null(tmp_path: Path, gputrain_home: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.chdir(plain)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    sub = LocalBackend(JobRegistry()).prepare(_plan(), logs_dir=tmp_path / "logs")
    assert json.loads((sub.job_dir / PROVENANCE_FILE).read_text())["launch"]["git"] is None


def test_the_training_adds_its_runtime_once(tmp_path: Path) -> None:
    (tmp_path / PROVENANCE_FILE).write_text(json.dumps({"launch": {"libraries": {"torch": "0.1"}}}))
    record_runtime(tmp_path, torch.device("cpu"))
    data = json.loads((tmp_path / PROVENANCE_FILE).read_text())
    assert data["launch"] == {"libraries": {"torch": "0.1"}}  # the launching machine's half is kept
    runtime = data["runtime"]
    assert runtime["cuda"] == torch.version.cuda and runtime["torch_build"] == torch.__version__
    assert runtime["libraries"]["torch"] == metadata.version("torch")
    first = runtime["recorded_at"]
    record_runtime(tmp_path, torch.device("cpu"))  # a resumed job keeps the start's record
    assert json.loads((tmp_path / PROVENANCE_FILE).read_text())["runtime"]["recorded_at"] == first


def test_changes_name_each_differing_fact() -> None:
    old = {"launch": {"libraries": {"torch": "2.12.0", "trl": "1.16.0"}, "git": {"commit": "a" * 40, "dirty": False}},
           "runtime": {"cuda": "12.4", "driver": "550.1"}}
    new = {"launch": {"libraries": {"torch": "2.13.0", "trl": "1.16.0"}, "git": {"commit": "b" * 40, "dirty": True}},
           "runtime": {"cuda": "12.8", "driver": "550.1"}}
    assert changes(old, new) == ["cuda 12.4 → 12.8", "git commit aaaaaaaaaaaa → bbbbbbbbbbbb", "git dirty no → yes",
                                 "torch 2.12.0 → 2.13.0"]
    assert changes(new, new) == []


def test_summary_shows_what_changed_since_the_previous_job_of_the_recipe(tmp_path: Path, gputrain_home: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _user_repo(tmp_path)
    monkeypatch.chdir(repo)
    backend = LocalBackend(JobRegistry())
    first = backend.prepare(_plan(), logs_dir=tmp_path / "logs")
    (repo / "train.py").write_text("print(3)\n")
    _git(repo, "commit", "-q", "-am", "two")
    second = backend.prepare(_plan(), logs_dir=tmp_path / "logs")
    older = json.loads((first.job_dir / PROVENANCE_FILE).read_text())
    older["launch"]["libraries"]["transformers"] = "4.0.0"  # last month's install
    (first.job_dir / PROVENANCE_FILE).write_text(json.dumps(older))

    changed = changed_since_previous(second.job_dir, "gnn_coloring")
    assert changed is not None and changed["since"] == first.job_id
    now = metadata.version("transformers")
    assert f"transformers 4.0.0 → {now}" in changed["changes"]
    assert any(c.startswith("git commit ") for c in changed["changes"])
    row = dict(overview_rows({"start": None, "end": None, "duration_s": None, "steps": {"done": 0, "planned": 0},
                              "cost": {}, "changed": changed}))["changed"]
    assert row.startswith(f"since job {first.job_id}: ") and f"transformers 4.0.0 → {now}" in row
    assert changed_since_previous(first.job_dir, "gnn_coloring") is None  # nothing before the first
