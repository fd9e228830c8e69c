"""Measured cost of a run, recorded when it closes: ``perf.json`` and one ``perf/*`` metrics record.

The planner calibrates from these (``gputrain plan`` shows predicted vs measured). Peak memory is the
largest over the ranks: ``torch.cuda.max_memory_allocated`` on GPUs, the resident set (``ru_maxrss``) on
CPU; step time is the median over the steps the training logged, warm-up and compiling steps left out
(``gputrain.contract.perf.steady_steps``).
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from gputrain.contract.perf import PERF_FILE, PHASE_KEYS, MeasuredPerf, median_step_seconds, steady_steps

_KEPT = ("step_seconds", "tokens_per_s", *PHASE_KEYS)


class PerfLog:
    """What rank 0's metrics records said about time (kept small: a few numbers per logged step)."""

    def __init__(self) -> None:
        self.started = time.time()
        self.stamps: list[tuple[int, float]] = []
        self.values: dict[str, list[float]] = {k: [] for k in _KEPT}
        self.compiled: list[bool] = []  # per logged step_seconds: torch's compiler ran in that step
        self.compile_seconds: float | None = None  # the records' compile_seconds, summed

    def observe(self, record: dict[str, Any]) -> None:
        step, stamp = int(record["step"]), float(record["time"])
        if not self.stamps or step > self.stamps[-1][0]:
            self.stamps.append((step, stamp))
        for key in _KEPT:
            if key in record:
                self.values[key].append(float(record[key]))
        spent = float(record.get("compile_seconds") or 0.0)
        if "step_seconds" in record:
            self.compiled.append(spent > 0)
        if spent > 0:
            self.compile_seconds = (self.compile_seconds or 0.0) + spent


def _peak_gib(device: torch.device) -> tuple[float, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1024**3, "cuda_max_allocated"
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / (1024**3 if sys.platform == "darwin" else 1024**2), "rss"


def _host_usage() -> tuple[float, float]:
    """(CPU seconds, peak resident GiB) of this rank: itself and the children it waited for."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    unit = 1024**3 if sys.platform == "darwin" else 1024**2
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime, max(own.ru_maxrss, kids.ru_maxrss) / unit


def measure(log: PerfLog, device: torch.device, world_size: int) -> MeasuredPerf:
    """Every rank calls this (the peak is reduced over ranks, CPU time and host memory summed); rank 0's
    log holds the timings."""
    peak, kind = _peak_gib(device)
    cpu, rss = _host_usage()
    if dist.is_available() and dist.is_initialized():
        t = torch.tensor([peak], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        peak = float(t.item())
        u = torch.tensor([cpu, rss], dtype=torch.float64, device=device)
        dist.all_reduce(u, op=dist.ReduceOp.SUM)
        cpu, rss = (float(v) for v in u.tolist())
    logged, warmup = steady_steps(log.values["step_seconds"], log.compiled)
    # what the steady figure leaves out is start-up: the warm-up steps' own wall time, a phase of its own
    warm_s = sum(log.values["step_seconds"]) - sum(logged) if log.values["step_seconds"] else None
    step, timed = median_step_seconds(log.stamps, logged)
    phases = {name: statistics.median(log.values[key]) for key, name in PHASE_KEYS.items() if log.values[key]}
    tokens = log.values["tokens_per_s"]
    return MeasuredPerf(step_seconds=step, steps_timed=timed, phases=phases, warmup_steps=warmup,
                        compile_seconds=None if log.compile_seconds is None else round(log.compile_seconds, 3),
                        warmup_seconds=None if warm_s is None else round(warm_s, 3),
                        tokens_per_s=statistics.median(tokens) if tokens else None, peak_memory_gib=peak,
                        peak_memory_kind=kind,  # type: ignore[arg-type]
                        wall_seconds=time.time() - log.started, world_size=world_size, device=device.type,
                        cpu_seconds=round(cpu, 3), host_rss_gib=round(rss, 4))


def record(log: PerfLog, device: torch.device, world_size: int, job_dir: Any, metrics: Any, is_main: bool) -> None:
    from gputrain.atomic import write_atomic

    perf = measure(log, device, world_size)
    if not is_main:
        return
    write_atomic(job_dir / PERF_FILE, perf.model_dump_json(indent=2) + "\n")
    last = log.stamps[-1][0] if log.stamps else 0
    numbers = {f"perf/{k}": v for k, v in (("step_seconds", perf.step_seconds),
                                           ("peak_memory_gib", perf.peak_memory_gib),
                                           ("compile_seconds", perf.compile_seconds),
                                           ("warmup_seconds", perf.warmup_seconds)) if v is not None}
    metrics.log(last, **numbers)


def resolve_attention(requested: str, device: torch.device) -> tuple[str, str]:
    """``auto`` → flash-attn where this node has it and the GPU supports it (compute capability ≥ 8), else
    sdpa; (choice, reason for the log). Other values pass through."""
    if requested != "auto":
        return requested, "as planned"
    import importlib.util

    if device.type != "cuda":
        return "sdpa", "no CUDA device"
    if torch.cuda.get_device_capability(device)[0] < 8:
        return "sdpa", "GPU predates Ampere"
    if importlib.util.find_spec("flash_attn") is None:
        return "sdpa", "flash-attn is not installed on this node"
    return "flash", "flash-attn installed and supported"
