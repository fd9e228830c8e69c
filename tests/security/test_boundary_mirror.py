"""#25.11 and #31.1 — ``gputrain prepare`` against a hostile or unreachable mirror, and the offline dry run.

Names from a server are data. A mirror (``HF_ENDPOINT``, here the project's real local hub server) that
lists a dataset file as ``/home/me/notes.json`` or ``data/../../../notes.json``, or answers a commit id
``../../..``, made ``prepare`` "remove a damaged copy" of the user's own file outside the cache. Now the
repository is refused in one line (exit 1) and nothing outside the cache is touched. An endpoint that does
not answer is one line too (huggingface_hub raises its HTTP client's errors, not ``OSError``), and the
SuperCloud dry run writes the job folder and lists what ``prepare`` must fetch instead of refusing.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.hub_server import HubServer, RepoFile

ROOT = Path(__file__).resolve().parents[2]
MBPP = ROOT / "recipes" / "grpo_code_mbpp.yaml"
CLI = [sys.executable, "-m", "gputrain.cli.main"]
DATASET = "evil-org/data"
pytestmark = pytest.mark.slow  # each case runs the CLI once (~3-8 s on 2 busy cores)
MODEL = "evil-org/model"


def _cli(tmp_path: Path, *args: str, endpoint: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf-home"),
           "GPUTRAIN_CONFIG": str(tmp_path / "clusters.yaml"), "GPUTRAIN_HOME": str(tmp_path / "home")}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180,
                          check=False)


def _one_line_failure(proc: subprocess.CompletedProcess[str], code: int) -> str:
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.strip().splitlines() if not line.endswith("/cache")]  # progress
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    return lines[0]


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[HubServer]:
    data = tmp_path / "repos" / "data"
    (data / "data").mkdir(parents=True)
    (data / "data" / "train.jsonl").write_text('{"text": "x"}\n')
    model = tmp_path / "repos" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "qwen2"}\n')
    with HubServer({("dataset", DATASET): data, ("model", MODEL): model}) as hub:
        yield hub


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "user" / "notes.json"
    victim.parent.mkdir()
    victim.write_text('{"mine": "do not delete"}\n')
    return victim


def _plant(hub: HubServer, kind: str, repo: str, name: str) -> None:
    hub.repos[(kind, repo)].files[name] = RepoFile(name, b"{}\n", "0" * 40, None)


@pytest.mark.parametrize("style", ["absolute", "dotdot"])
def test_a_hostile_file_name_never_removes_a_file_outside_the_cache(tmp_path: Path, mirror: HubServer,
                                                                    style: str) -> None:
    victim = _victim(tmp_path)
    name = str(victim) if style == "absolute" else "data/" + "../" * 40 + str(victim).lstrip("/")
    _plant(mirror, "dataset", DATASET, name)
    proc = _cli(tmp_path, "prepare", str(MBPP), "--cluster", "supercloud", "--cache-dir", str(tmp_path / "cache"),
                "--set", "model.name=tiny-qwen2", "--set", f"data.source={DATASET}", endpoint=mirror.url)
    assert victim.exists(), "prepare removed a user's file named by the mirror"
    line = _one_line_failure(proc, 1)
    assert "not a plain relative path" in line and DATASET in line
    assert not [p for p in mirror.downloads() if "notes" in p]


def test_a_hostile_commit_id_never_becomes_a_path(tmp_path: Path, mirror: HubServer) -> None:
    victim = _victim(tmp_path)
    cache = tmp_path / "cache"
    # snapshots/<commit>/config.json == the victim's folder/config.json: "a damaged copy" to remove
    (victim.parent / "config.json").write_text("{}\n")
    repo = mirror.repos[("model", MODEL)]
    repo.commit = os.path.relpath(victim.parent, cache / "hub" / "models--evil-org--model" / "snapshots")
    proc = _cli(tmp_path, "prepare", str(MBPP), "--cluster", "supercloud", "--cache-dir", str(cache),
                "--set", f"model.name={MODEL}", "--set", "data.source=humaneval", endpoint=mirror.url)
    assert (victim.parent / "config.json").exists(), "prepare removed a file outside the cache"
    assert "not 40 hex digits" in _one_line_failure(proc, 1)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_mirror_is_one_line_exit_1(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "prepare", str(MBPP), "--cluster", "supercloud", "--cache-dir", str(tmp_path / "cache"),
                endpoint=f"http://127.0.0.1:{_closed_port()}")
    line = _one_line_failure(proc, 1)
    assert "cannot reach the hub" in line


def test_supercloud_dry_run_writes_the_folder_and_lists_what_prepare_must_fetch(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "submit", str(MBPP), "--cluster", "supercloud", "--dry-run", "--logs-dir",
                str(tmp_path / "logs"), "--json", endpoint=f"http://127.0.0.1:{_closed_port()}")
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)
    assert (Path(row["job_dir"]) / "job.sbatch").is_file()
    assert row["prepare"]["command"].startswith("gputrain prepare ")
    assert row["prepare"]["missing"] == ["model Qwen/Qwen2.5-Coder-1.5B-Instruct",
                                         "dataset google-research-datasets/mbpp split train"]
    # (a real submit still refuses in one line: tests/unit/test_offline.py)
