"""``jobs``/``status``/``cancel`` through the real CLI: one backend table, ids gputrain does not know, ids that
look like options, filters, ``--forget``, cancel of a finished job, RunPod rows.

Slurm commands are replaced by logging wrappers first on PATH: the tests prove what reaches them (nothing,
for an unknown id or an option-like one), not what a scheduler would do (tests/integration does that).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from gputrain.backends.base import Backend
from gputrain.backends.table import BACKENDS, load_backend
from gputrain.registry.store import BACKENDS as REGISTRY_BACKENDS
from gputrain.registry.store import JobRecord, JobRegistry
from tests.support.cli import gputrain as run_gputrain

SLURM_TOOLS = ("scancel", "squeue", "scontrol", "sacct", "sbatch", "sinfo")


@pytest.fixture
def wrapped(tmp_path: Path) -> Path:
    """A folder of Slurm commands that only log their argv (to calls.log) and fail."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in SLURM_TOOLS:
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{tmp_path}/calls.log"\nexit 1\n')
        script.chmod(0o755)
    return bin_dir


def _run(tmp_path: Path, bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUTRAIN_HOME": str(tmp_path / "home"), "GPUTRAIN_CONFIG": str(tmp_path / "c.yaml"),
           "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("RUNPOD_API_KEY", None)
    return run_gputrain(*args, cwd=tmp_path, env=env)


def _calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def _registry(tmp_path: Path) -> JobRegistry:
    return JobRegistry(tmp_path / "home" / "jobs.db")


def test_the_table_names_every_backend_and_each_row_is_a_backend(tmp_path: Path) -> None:
    assert tuple(BACKENDS) == REGISTRY_BACKENDS
    for name in BACKENDS:
        backend = load_backend(name, _registry(tmp_path))
        assert isinstance(backend, Backend) and backend.name == name


def test_unknown_id_is_exit_2_and_never_reaches_slurm(tmp_path: Path, wrapped: Path) -> None:
    for command in ("status", "cancel"):
        out = _run(tmp_path, wrapped, command, "4242")
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip() == ("error: no job '4242' known to gputrain (job id, name or folder; "
                                      "see `gputrain jobs`)")
    assert _calls(tmp_path) == []


def test_an_option_like_id_never_reaches_a_slurm_command(tmp_path: Path, wrapped: Path) -> None:
    _registry(tmp_path).add(JobRecord(job_id="--me", backend="slurm", state="RUNNING"))
    for command in ("status", "cancel"):
        out = _run(tmp_path, wrapped, command, "--", "--me")
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip() == "error: '--me' is not a Slurm job id (digits, e.g. 4242 or 4242_7)"
    assert _calls(tmp_path) == []
    assert _registry(tmp_path).get("--me").state == "RUNNING"


def test_slurm_commands_get_the_id_after_double_dash(tmp_path: Path, wrapped: Path) -> None:
    _registry(tmp_path).add(JobRecord(job_id="4242", backend="slurm", state="RUNNING"))
    out = _run(tmp_path, wrapped, "status", "4242")
    assert out.returncode == 1  # the wrapper fails: a failure of the world
    assert _calls(tmp_path) == ["scontrol show job -o -- 4242"]


def test_cancel_of_a_finished_job_is_a_stated_no_op(tmp_path: Path, wrapped: Path) -> None:
    _registry(tmp_path).add(JobRecord(job_id="4242", backend="slurm", state="COMPLETED", exit_code=0))
    _registry(tmp_path).add(JobRecord(job_id="", backend="local", state="FAILED", exit_code=1))
    out = _run(tmp_path, wrapped, "cancel", "4242")
    assert (out.returncode, out.stdout) == (0, "job 4242 already COMPLETED: nothing to cancel\n")
    out = _run(tmp_path, wrapped, "cancel", "local-2")
    assert (out.returncode, out.stdout) == (0, "job local-2 already FAILED: nothing to cancel\n")
    assert _calls(tmp_path) == []
    assert _registry(tmp_path).get("4242").state == "COMPLETED"


def _populate(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    rows = [
        ("11", "slurm", "selftest", "COMPLETED", ["train.seed=0"]),
        ("12", "slurm", "selftest", "FAILED", ["train.seed=1"]),
        ("13", "slurm", "gnn", "RUNNING", []),
        ("", "local", "gnn", "COMPLETED", []),
        ("", "local", "selftest", "PENDING", []),
        ("gputrain-gnn-b200x8", "runpod", "gnn", "RUNNING", []),
    ]
    for job_id, backend, recipe, state, sweep in rows:
        reg.add(JobRecord(job_id=job_id, backend=backend, recipe=recipe, state=state,
                          job_dir=str(tmp_path / f"job{job_id or backend}"), extra={"sweep": sweep} if sweep else {}))


def _ids(tmp_path: Path, wrapped: Path, *args: str) -> list[str]:
    out = _run(tmp_path, wrapped, "jobs", "--no-refresh", "--json", *args)
    assert out.returncode == 0, out.stderr
    return [r["job_id"] for r in json.loads(out.stdout)]


def test_jobs_filters_by_state_backend_recipe_and_sweep(tmp_path: Path, wrapped: Path) -> None:
    _populate(tmp_path)
    assert _ids(tmp_path, wrapped) == ["gputrain-gnn-b200x8", "local-5", "local-4", "13", "12", "11"]
    assert _ids(tmp_path, wrapped, "--state", "running") == ["gputrain-gnn-b200x8", "13"]
    assert _ids(tmp_path, wrapped, "--backend", "runpod") == ["gputrain-gnn-b200x8"]
    assert _ids(tmp_path, wrapped, "--recipe", "selftest", "--backend", "slurm") == ["12", "11"]
    assert _ids(tmp_path, wrapped, "--sweep", "train.seed") == ["12", "11"]
    assert _ids(tmp_path, wrapped, "--sweep", "train.seed=1") == ["12"]
    assert _ids(tmp_path, wrapped, "--state", "COMPLETED", "-n", "1") == ["local-4"]
    bad = _run(tmp_path, wrapped, "jobs", "--state", "RUNING")
    assert bad.returncode == 2
    assert bad.stderr.strip() == "error: unknown job state 'RUNING'; did you mean RUNNING or PENDING?"
    bad = _run(tmp_path, wrapped, "jobs", "--backend", "k8s")
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown backend 'k8s'; known: local, slurm, runpod")


def test_jobs_forget_removes_finished_jobs_only(tmp_path: Path, wrapped: Path) -> None:
    _populate(tmp_path)
    out = _run(tmp_path, wrapped, "jobs", "--no-refresh", "--forget", "--recipe", "selftest")
    assert out.returncode == 0 and out.stdout == "forgot 2 finished job(s); kept 1 unfinished\n"
    assert _ids(tmp_path, wrapped) == ["gputrain-gnn-b200x8", "local-5", "local-4", "13"]
    out = _run(tmp_path, wrapped, "jobs", "--no-refresh", "--forget", "--json")
    assert json.loads(out.stdout) == {"forgotten": ["local-4"], "kept_unfinished": 3}
    assert _ids(tmp_path, wrapped) == ["gputrain-gnn-b200x8", "local-5", "13"]


def test_runpod_jobs_are_listed_and_answer_status_from_the_registry(tmp_path: Path, wrapped: Path) -> None:
    _populate(tmp_path)
    out = _run(tmp_path, wrapped, "status", "gputrain-gnn-b200x8", "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert (info["state"], info["backend"]) == ("RUNNING", "runpod")
    assert info["reason"].startswith("RunPod not asked: ")  # no API key here: said, not guessed
    table = _run(tmp_path, wrapped, "jobs", "--no-refresh").stdout
    assert "gputrain-gnn-b200x8" in table and "runpod" in table


@pytest.mark.slow  # real torchrun and two workers (10-25 s on 2 cores): integration-like; CI runs it
def test_cancel_of_a_running_local_job_ends_every_process(tmp_path: Path, wrapped: Path) -> None:
    """A real detached run (supervisor, bash, torchrun, two workers): after `gputrain cancel` returns, none of
    them is left and the registry says CANCELLED. (The summary's state is the job-state contract's part.)"""
    import time

    import psutil

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "selftest.yaml"
    started = _run(tmp_path, wrapped, "run", str(recipe), "--gpu", "cpu", "--gpus", "2", "--detach",
                   "--set", "algorithm.sleep_seconds=120", "--set", "train.max_steps=60",
                   "--logs-dir", str(tmp_path / "logs"))
    assert started.returncode == 0, started.stderr
    registry = _registry(tmp_path)
    deadline = time.monotonic() + 120
    while (registry.get("local-1").extra or {}).get("pid") is None or not list(
            (tmp_path / "logs").glob("*/metrics.jsonl")):
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.5)
    record = registry.get("local-1")
    tree = [psutil.Process(record.extra["supervisor_pid"])]
    tree += tree[0].children(recursive=True)
    try:
        assert len(tree) == 4  # supervisor, torchrun (launch.sh execs it), two workers
        out = _run(tmp_path, wrapped, "cancel", "local-1")
    finally:
        for proc in tree:  # a failed assertion must not leave the job running
            if proc.is_running() and _registry(tmp_path).get("local-1").state != "CANCELLED":
                proc.kill()
    assert (out.returncode, out.stdout) == (0, "cancelled job local-1 (local)\n"), out.stderr
    _, alive = psutil.wait_procs(tree, timeout=30)  # the supervisor writes the summary, then exits
    assert alive == [], [p.info for p in alive]
    assert registry.get("local-1").state == "CANCELLED"
    again = _run(tmp_path, wrapped, "cancel", "local-1")
    assert again.stdout == "job local-1 already CANCELLED: nothing to cancel\n"
    assert _calls(tmp_path) == []
