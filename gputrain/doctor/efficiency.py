"""How much of what a finished job asked for it used, like Slurm's ``seff``: time, CPU, memory, GPU hours.

The allocation is the job's shape (``gputrain.render.sbatch.job_shape``: the recipe asks, the cluster
profile caps), so it is what the job script asked Slurm for. Usage comes from Slurm's accounting where it
exists (``sacct``) and otherwise from the job's own measurement (``perf.json``: CPU seconds and peak
resident memory summed over the ranks, recorded by every training when it closes), so the report also
works on clusters without accounting, for local runs and on RunPod pods.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gputrain.backends.slurm_accounting import SchedulerUsage
    from gputrain.contract.plan import JobPlan

#: states with nothing to report yet
_NOT_ENDED = {"RUNNING", "PENDING", None}


def _own_usage(job_dir: Path | None) -> dict[str, Any]:
    path = job_dir / "perf.json" if job_dir is not None else None
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _ratio(used: float | None, of: float | None) -> float | None:
    return round(used / of, 4) if used is not None and of else None


def efficiency(summary: dict[str, Any], job_dir: Path | None, plan: JobPlan | None,
               usage: SchedulerUsage | None = None) -> dict[str, Any] | None:
    """The report for an ended job (None while it runs, or with neither a plan nor a measurement)."""
    from gputrain.render.sbatch import job_shape, time_seconds

    if summary.get("state") in _NOT_ENDED or plan is None:
        return None
    own = _own_usage(job_dir)
    shape = job_shape(plan)
    ranks_per_node = max(plan.gpus_per_node, 1)
    cpus = plan.nodes * ranks_per_node * int(shape["cpus_per_gpu"])
    memory = plan.nodes * shape["memory_gb"] if shape.get("memory_gb") else None
    limit = float(time_seconds(shape["time"])) if plan.cluster is not None else None
    elapsed: float | None
    cpu_s: float | None
    rss: float | None
    if usage is not None:
        source, elapsed, cpu_s, rss = "sacct", usage.elapsed_s, usage.cpu_s, usage.max_rss_gib
        cpus = usage.alloc_cpus or cpus
    else:
        source = "job (perf.json)" if own else "job log"
        elapsed = summary.get("duration_s") or own.get("wall_seconds")
        cpu_s, rss = own.get("cpu_seconds"), own.get("host_rss_gib")
    if elapsed is None:
        return None
    gpus = plan.world_size if plan.gpu.name != "cpu" else 0  # the cpu profile's ranks are processes
    return {
        "source": source,
        "elapsed_s": round(float(elapsed), 1),
        "time_limit_s": limit,
        "time_used": _ratio(elapsed, limit),
        "cpus": cpus,
        "cpu_seconds": cpu_s,
        "cpu_efficiency": _ratio(cpu_s, cpus * float(elapsed)),
        "memory_gib": memory,
        "memory_peak_gib": rss,
        "memory_efficiency": _ratio(rss, memory),
        "gpu_hours": round(gpus * float(elapsed) / 3600, 4),
    }

