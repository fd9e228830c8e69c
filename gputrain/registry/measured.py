"""Measured runs the planner learns from: the registry's finished jobs whose folders hold ``perf.json``.

Each run is kept once in ``measured.jsonl`` next to the registry database, with what determines its
cost (the resolved recipe, GPU type, world size, precision, from its ``plan.json``) and what it measured
(``perf.json``). New jobs are picked up lazily, when a plan asks: no backend has to report to the store,
so local and Slurm jobs (whose folders are on a shared file system) both count. A RunPod job counts once
its folder has been copied back.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gputrain.contract.perf import PERF_FILE, MeasuredPerf
from gputrain.registry.store import JobRegistry

STORE_FILE = "measured.jsonl"
SCAN_LIMIT = 500


@dataclass(frozen=True)
class MeasuredRun:
    job: str                      # backend:job_id
    job_dir: str
    entrypoint: str
    gpu: str
    world_size: int
    precision: str
    recipe: dict[str, Any] = field(default_factory=dict)  # the resolved recipe (plan.json "recipe")
    perf: dict[str, Any] = field(default_factory=dict)    # perf.json


def _from_job(job: str, job_dir: Path) -> MeasuredRun | None:
    try:
        perf = MeasuredPerf.model_validate_json((job_dir / PERF_FILE).read_text(encoding="utf-8"))
        plan = json.loads((job_dir / "plan.json").read_text(encoding="utf-8"))
        recipe = plan["recipe"]
        return MeasuredRun(job=job, job_dir=str(job_dir), entrypoint=str(recipe["entrypoint"]),
                           gpu=str(plan["gpu"]["name"]), world_size=int(plan["world_size"]),
                           precision=str(plan["precision"]), recipe=recipe, perf=perf.model_dump(mode="json"))
    except (OSError, ValueError, KeyError, TypeError):  # no perf yet, or a foreign folder: not a measurement
        return None


def _read_store(path: Path) -> dict[str, MeasuredRun]:
    runs: dict[str, MeasuredRun] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return runs
    for line in lines:
        try:
            run = MeasuredRun(**json.loads(line))
        except (ValueError, TypeError):
            continue  # a torn or foreign line costs that line only
        runs[run.job] = run
    return runs


def measured_runs(registry: JobRegistry | None = None) -> list[MeasuredRun]:
    """Every measured run known, the store's and the registry's new ones (added to the store)."""
    registry = registry or JobRegistry()
    store = Path(registry.path).with_name(STORE_FILE)
    runs = _read_store(store)
    fresh: list[MeasuredRun] = []
    for rec in registry.list(SCAN_LIMIT):
        key = f"{rec.backend}:{rec.job_id}"
        if key in runs or not rec.job_dir or rec.state != "COMPLETED":
            continue
        run = _from_job(key, Path(rec.job_dir))
        if run is not None:
            runs[key] = run
            fresh.append(run)
    if fresh and not registry.read_only():
        try:
            store.parent.mkdir(parents=True, exist_ok=True)
            with open(store, "a", encoding="utf-8") as fh:  # one line per run: appends do not interleave
                for run in fresh:
                    fh.write(json.dumps(asdict(run), sort_keys=True) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        except OSError:
            pass  # the next plan reads the folders again
    return list(runs.values())
