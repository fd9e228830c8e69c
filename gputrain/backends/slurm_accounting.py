"""What Slurm's accounting says a finished job used (``sacct``), for the efficiency report.

``seff`` reads the same fields. Where accounting is disabled (the testbed, many small clusters) ``sacct``
fails and this returns None: the report then uses the job's own measurement (``perf.json``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gputrain.backends.slurm import run_slurm
from gputrain.errors import ClusterError

FIELDS = "JobID,State,Elapsed,TotalCPU,AllocCPUS,MaxRSS,ReqMem,NNodes"
#: sacct states of a job whose totals are not final
UNFINISHED = frozenset({"RUNNING", "PENDING", "REQUEUED", "RESIZING", "SUSPENDED"})
_SIZE = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclass(frozen=True)
class SchedulerUsage:
    """One job's totals over its steps: elapsed wall time, CPU time, allocated CPUs, peak RSS of a task."""

    elapsed_s: float
    cpu_s: float
    alloc_cpus: int
    max_rss_gib: float | None


def slurm_seconds(text: str) -> float:
    """``[D-]HH:MM:SS[.mmm]``, ``MM:SS.mmm`` (sacct's TotalCPU under an hour) → seconds."""
    days, _, rest = text.strip().rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    if not parts or len(parts) > 3:
        raise ValueError(f"not a Slurm duration: {text!r}")
    seconds = 0.0
    for part in parts:
        seconds = seconds * 60 + part
    return seconds + (int(days) * 86400 if days else 0)


def slurm_bytes(text: str) -> float | None:
    """``MaxRSS`` such as ``123456K`` or ``1.5G`` → bytes; empty → None."""
    m = re.fullmatch(r"([0-9.]+)([KMGT]?)", text.strip())
    if not m:
        return None
    return float(m.group(1)) * _SIZE.get(m.group(2), 1)


def parse_sacct(text: str, job_id: str) -> SchedulerUsage | None:
    """``sacct -P -n --format FIELDS`` output → usage of ``job_id``: the allocation line's elapsed time and
    CPUs; CPU time summed over the steps (``batch``, ``extern``, ``0``...), the largest step MaxRSS."""
    rows = [line.split("|") for line in text.splitlines() if line.count("|") == FIELDS.count(",")]
    main = next((r for r in rows if r[0] == job_id), None)
    if main is None or main[1].split()[0] in UNFINISHED:
        return None  # asked from inside the job (its final summary): the batch step's CPU time is not in yet
    steps = [r for r in rows if r[0].startswith(job_id + ".")]
    cpu = sum(slurm_seconds(r[3]) for r in steps if r[3]) if steps else slurm_seconds(main[3] or "0")
    rss = [b for r in steps if (b := slurm_bytes(r[5])) is not None]
    return SchedulerUsage(elapsed_s=slurm_seconds(main[2]), cpu_s=cpu, alloc_cpus=int(main[4] or 0),
                          max_rss_gib=max(rss) / 2**30 if rss else None)


def sacct_usage(job_id: str) -> SchedulerUsage | None:
    """The job's usage from accounting, or None where ``sacct`` is missing, disabled or knows no such job."""
    try:
        proc = run_slurm(["sacct", "-j", job_id, "-P", "-n", "--format", FIELDS])
    except ClusterError:  # no sacct on PATH, or the controller does not answer
        return None
    if proc.returncode != 0:
        return None
    try:
        return parse_sacct(proc.stdout, job_id)
    except ValueError:
        return None
