"""What changed since the previous job of the same recipe: library versions, git commit, CUDA, driver.

Each job folder holds ``provenance.json`` (:mod:`gputrain.contract.provenance`); the previous job is the
newest other job of the recipe in the registry whose record was written earlier. ``gputrain logs JOB``
shows the differences as one ``changed`` row, or says that nothing recorded changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gputrain.contract.provenance import PROVENANCE_FILE, changes

_SCANNED = 50  # previous jobs of the recipe looked at (newest first)


def read_provenance(job_dir: Path) -> dict[str, Any] | None:
    from gputrain.logs.jsonfile import plain_file

    path = job_dir / PROVENANCE_FILE
    if not plain_file(path):
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _stamp(record: dict[str, Any]) -> float:
    launch = record.get("launch") if isinstance(record.get("launch"), dict) else {}
    value = launch.get("recorded_at") if isinstance(launch, dict) else None
    return float(value) if isinstance(value, (int, float)) else 0.0


def changed_since_previous(job_dir: Path, recipe: str | None) -> dict[str, Any] | None:
    """``{"since": JOB_ID, "changes": [...]}`` against the previous job of ``recipe``; None without a record
    here, a recipe name or an earlier job with one."""
    from gputrain.errors import GputrainError
    from gputrain.registry.store import JobRegistry

    own = read_provenance(job_dir)
    if own is None or not recipe:
        return None
    try:
        records = JobRegistry().list(_SCANNED, recipe=recipe)
    except GputrainError:
        return None
    here, best = job_dir.resolve(), None
    for rec in records:
        if not rec.job_dir or Path(rec.job_dir).resolve() == here:
            continue
        other = read_provenance(Path(rec.job_dir))
        if other is None or _stamp(other) >= _stamp(own):
            continue
        if best is None or _stamp(other) > _stamp(best[1]):
            best = (rec.job_id, other)
    if best is None:
        return None
    return {"since": best[0], "changes": changes(best[1], own)}
