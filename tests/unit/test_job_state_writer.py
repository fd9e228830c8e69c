"""Job state has one writer (``gputrain.registry.transitions``): no other module of the package writes the
registry, a local run writes its row a bounded number of times, and a job is recorded with its folder or not
at all."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from gputrain.backends.local import LocalBackend
from gputrain.registry.store import JobRecord, JobRegistry
from gputrain.registry.transitions import record_job
from tests.conftest import RECIPES, ROOT

WRITER = Path("gputrain/registry/transitions.py")
WRITES = {"add", "update", "forget"}


def registry_writes(source: str) -> list[str]:
    """Calls in ``source`` that write a job registry: ``<...registry...>.add/update/forget(...)``, and any
    ``.update(`` given a ``state``/``exit_code`` (a registry reached under another name)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITES):
            continue
        owner = ast.unparse(node.func.value)
        keywords = {k.arg for k in node.keywords}
        if "registry" in owner.lower() or (node.func.attr == "update" and keywords & {"state", "exit_code"}):
            found.append(f"line {node.lineno}: {ast.unparse(node.func)}")
    return found


def test_the_finder_sees_every_spelling_of_a_registry_write() -> None:
    source = ("self.registry.update(j, state='X')\nregistry.add(r)\n_registry().forget([r])\n"
              "run.registry.update(n, extra={})\nreg.update(j, state='RUNNING')\nfacts.update(a=1)\nseen.add(x)\n")
    assert len(registry_writes(source)) == 5


def test_only_the_transitions_module_writes_the_registry() -> None:
    offenders = {}
    for path in sorted((ROOT / "gputrain").rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel == WRITER or rel.parts[:2] == ("gputrain", "train"):
            continue
        writes = registry_writes(path.read_text())
        if writes:
            offenders[str(rel)] = writes
    assert offenders == {}, f"write job state through {WRITER} (record_job/record_state/record_facts): {offenders}"


class CountingRegistry(JobRegistry):
    """The real SQLite registry, counting its writes."""

    writes: list[str]

    def add(self, record: JobRecord, locate: Any = None) -> JobRecord:
        self.writes.append("add")
        return super().add(record, locate=locate)

    def update(self, job_id: str, **fields: Any) -> JobRecord:
        self.writes.append(f"update {fields.get('state', sorted(fields))}")
        return super().update(job_id, **fields)


def test_one_foreground_local_run_writes_its_row_three_times(tmp_path: Path) -> None:
    from gputrain.planner import make_plan

    registry = CountingRegistry(tmp_path / "jobs.db")
    registry.writes = []
    plan = make_plan(RECIPES / "selftest.yaml", gpu="cpu", gpus_per_node=1, nodes=1, target="local")
    backend = LocalBackend(registry, attached=True)
    sub = backend.prepare(plan, logs_dir=tmp_path / "logs")
    (sub.job_dir / "launch.sh").write_text("#!/usr/bin/env bash\necho step 1\n")  # the job itself is not the point
    assert backend.run(sub) == 0
    assert registry.writes == ["add", "update RUNNING", "update COMPLETED"]  # recorded with its folder, ran, ended
    rec = registry.get(sub.job_id)
    assert (rec.state, rec.exit_code, rec.job_dir, rec.name) == ("COMPLETED", 0, str(sub.job_dir), sub.job_dir.name)


def test_a_job_whose_folder_cannot_be_placed_is_not_recorded(tmp_path: Path) -> None:
    registry = JobRegistry(tmp_path / "jobs.db")

    def place(job_id: str) -> Path:
        raise OSError(f"no room for {job_id}")

    with pytest.raises(OSError, match="no room for local-1"):
        record_job(registry, JobRecord(job_id="", backend="local"), locate=place)
    assert registry.list() == []
    placed = record_job(registry, JobRecord(job_id="", backend="local"), locate=lambda j: tmp_path / f"job_{j}")
    assert (placed.name, placed.job_dir) == (f"job_{placed.job_id}", str(tmp_path / f"job_{placed.job_id}"))
    assert registry.get(placed.job_id).job_dir == placed.job_dir
