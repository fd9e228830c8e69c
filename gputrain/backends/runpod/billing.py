"""What a RunPod run cost: the pod's billed rate (the API's ``cost``, USD/h) × how long the pod existed.

Not the catalog price × training time: a pod bills from its creation to its termination (image pull, ssh
wait, upload, salvage included) at the rate RunPod charged for it. The summary, ``runpod status`` and
``gputrain jobs`` all show this figure.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any


def _epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def billed_cost(rate_per_hour: float, created_at: str | None, created_wall: float, end_wall: float
                ) -> tuple[float, float]:
    """(USD, uptime in seconds): ``rate_per_hour`` × the time from the pod's creation (the API's
    ``createdAt``, else when this machine created it) to ``end_wall``."""
    start = _epoch(created_at)
    start = created_wall if start is None else min(start, created_wall)
    uptime = max(0.0, end_wall - start)
    return rate_per_hour * uptime / 3600.0, uptime


def live_cost(extra: dict[str, Any], now: float) -> float | None:
    """A registry record's cost: final when it has ended, rate × uptime so far while it runs."""
    rate = extra.get("cost_per_hour_usd")
    since = extra.get("created_wall")
    if extra.get("cost_usd") is not None and not extra.get("live"):
        return float(extra["cost_usd"])
    if isinstance(rate, (int, float)) and isinstance(since, (int, float)):
        return float(rate) * max(0.0, now - since) / 3600.0
    return None


def write_job_summary(job_dir: Path, record: dict[str, Any], gpu_count: int) -> None:
    """``summary.json``/``job_summary.txt`` from what is in the job folder, with the run's own end state and
    the billed cost (the pod's own summary, when it was downloaded, is rewritten the same way)."""
    from gputrain.atomic import write_atomic
    from gputrain.logs.report import render_text
    from gputrain.logs.summarize import summarize

    summary = summarize(job_dir, final=True, exit_code=record["exit_code"])
    summary["state"] = record["state"]
    summary["cause"] = summary.get("cause") or record["reason"]
    summary["runpod"] = {k: record[k] for k in ("pod_id", "reason", "salvaged", "terminated")}
    if record.get("attempts"):  # `runpod up --retry`: each pod the run took, evicted ones first
        summary["runpod"]["attempts"] = record["attempts"]
    hours = record["uptime_s"] / 3600.0
    summary["cost"] = {
        "gpu_hours": hours * gpu_count if gpu_count else None,
        "gpu_hourly_usd": record["cost_per_hour_usd"] / gpu_count if gpu_count else None,
        "usd": record["cost_usd"],
        "billed_usd_per_hour": record["cost_per_hour_usd"],
        "uptime_s": record["uptime_s"],
        "source": "RunPod billed rate × pod uptime",
    }
    write_atomic(job_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    write_atomic(job_dir / "job_summary.txt", render_text(summary))
