"""The root cause of a failed job as data: what happened, where (rank, host), the numbers that say how bad.

A launcher reports a worker's failure in its own words, after the fact: torchrun raises ``ChildFailedError``
with a box naming the "Root Cause (first observed failure)" rank and host; ``srun`` prints
``srun: error: n1: task 1: Exited with exit code 1``; DeepSpeed's launcher ``exits with return code = 1``.
The cause a person needs is the worker's own exception, which is *above* that, often followed by other
ranks' consequential errors (gloo "Connection closed by peer", NCCL watchdog timeouts). :func:`root_cause`
picks it: the scheduler's own verdict (TIMEOUT, NODE_FAIL, PREEMPTED, OUT_OF_MEMORY) first; then a CUDA OOM
on any rank; then the traceback of the rank the launcher names (else the first traceback); then an NCCL
watchdog timeout; then the OOM killer, a signal, the exit code.

The result is a plain dict (JSON in ``summary.json``) with a ``remedy`` slot left empty: the failure doctor
fills it from the job's plan (largest batch that fits for an OOM, the ``--time`` a TIMEOUT needed, ...).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from gputrain.logs import fatal, verdict
from gputrain.logs.classify import CAUSE_LABELS, classify_line, signal_name

_LAUNCHER = ("ChildFailedError", "torch.distributed.elastic")
#: Exceptions that are the echo of another rank's failure, not a cause of their own.
_CONSEQUENCES = ("Connection closed by peer", "Connection reset by peer", "DistBackendError", "ProcessGroupGloo",
                 "Broken pipe", "recvBytes", "SIGTERM")
_BOX_ROOT_RE = re.compile(r"Root Cause \(first observed failure\):.*?host\s*:\s*(\S+).*?rank\s*:\s*(\d+)"
                          r".*?exitcode\s*:\s*(-?\d+)", re.S)
_NAME_END_RE = re.compile(r":(?=\s|$)")
_SRUN_RE = re.compile(r"srun: error: (\S+): tasks? (\d+)(?:-\d+)?: (?:Exited with exit code (\d+)|Killed|.*)")
_DS_LAUNCHER_RE = re.compile(r"exits with return code = (-?\d+)")
_OOM_RE = re.compile(
    r"Tried to allocate ([\d.]+) ([KMGT]i?B)\. GPU (\d+) has a total capac(?:i)?ty of ([\d.]+) ([KMGT]i?B) of which "
    r"([\d.]+) ([KMGT]i?B) is free\.(?: Including non-PyTorch memory, this process has ([\d.]+) ([KMGT]i?B) memory "
    r"in use\.)?(?: Of the allocated memory ([\d.]+) ([KMGT]i?B) is allocated by PyTorch, and ([\d.]+) ([KMGT]i?B) "
    r"is reserved)?"
)
_WATCHDOG_RE = re.compile(
    r"\[Rank (\d+)\]\s*Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=(\w+)"
    r"(?:, NumelIn=(\d+), NumelOut=(\d+))?, Timeout\(ms\)=(\d+)\) ran for (\d+) milliseconds"
)
_SLURM_STATES = {
    "TIMEOUT": ("time_limit", "Slurm stopped the job at its time limit"),
    "NODE_FAIL": ("node_fail", "a node of the job failed (Slurm NODE_FAIL)"),
    "PREEMPTED": ("preempted", "Slurm preempted the job"),
    "OUT_OF_MEMORY": ("host_oom", "Slurm's memory limit: the job ran out of host memory (OUT_OF_MEMORY)"),
    "DEADLINE": ("time_limit", "the job reached its Slurm deadline"),
}
_UNITS = {"B": 1 / 2**30, "KiB": 1 / 2**20, "KB": 1e3 / 2**30, "MiB": 1 / 2**10, "MB": 1e6 / 2**30, "GiB": 1.0,
          "GB": 1e9 / 2**30, "TiB": 1024.0, "TB": 1e12 / 2**30}
LABELS = {**CAUSE_LABELS, "nccl_timeout": "NCCL collective timeout", "node_fail": "node failure",
          "device_oom": "accelerator out of memory", "vllm_engine": "vLLM engine died",
          "fp16_overflow": "fp16 loss scale at its minimum", "disk_full": "disk full",
          "gpu_hardware": "GPU hardware fault", "cuda_error": "CUDA kernel fault", "process_died": "a worker died",
          "shm": "shared memory (/dev/shm) full", "cuda_setup": "CUDA driver or libraries do not fit the build",
          "task_failure": "a task of the Slurm step failed",
          "kernel_resources": "GPU kernel out of on-chip resources (shared memory or registers)",
          "cuda_init": "cuBLAS/cuDNN could not initialise (most often the GPU's memory already full)",
          "kv_cache": "inference engine: no GPU memory left for the KV cache",
          "dist_setup": "distributed set-up failed (the rendezvous store was not reached)",
          "network": "no network to download a model or data set"}
#: What a headline adds to the library's own words where those words hide the usual cause.
_HINTS = {"cuda_init": " (most often out of GPU memory when the library created its handle)"}
#: The backend an out-of-memory message names (ROCm's PyTorch says "HIP out of memory" in CUDA's format).
_BACKEND_RE = re.compile(r"\b(CUDA|HIP|XPU|MUSA|NPU)\b out of memory")


def _gib(value: str | None, unit: str | None) -> float | None:
    return None if value is None or unit is None else round(float(value) * _UNITS.get(unit, 1.0), 3)


def _cause(kind: str, headline: str, *, source: str = "log", **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": kind, "label": LABELS.get(kind, kind), "headline": headline, "source": source,
                           "exception": None, "message": None, "rank": None, "host": None, "details": {},
                           "evidence": None, "remedy": None}
    out.update(fields)
    return out


def _exception_of(traceback: str) -> tuple[str, str]:
    """(name, message) of a traceback's last line, split at the first colon that ends a word ("std::bad_alloc:
    x" is C++'s ``std::bad_alloc``, not ``std``)."""
    last = traceback.rstrip().splitlines()[-1].strip() if traceback.strip() else ""
    split = _NAME_END_RE.search(last)
    if split is None:
        return last, ""
    return last[: split.start()].strip(), last[split.end() :].strip()


def _is_launcher(text: str) -> bool:
    return any(m in text.splitlines()[-1] for m in _LAUNCHER) if text.strip() else False


def _where(text: str) -> tuple[int | None, str | None]:
    """The failed rank and host that a launcher names (torchrun's box, srun), or (None, None)."""
    box = _BOX_ROOT_RE.search(text)
    if box:
        return int(box.group(2)), box.group(1)
    srun = _SRUN_RE.search(text)
    if srun:
        return int(srun.group(2)), srun.group(1)
    return None, None


def _suffix(rank: int | None, host: str | None) -> str:
    where = ", ".join(x for x in (f"rank {rank}" if rank is not None else "", f"host {host}" if host else "") if x)
    return f" ({where})" if where else ""


def _from_traceback(entry: dict[str, Any], rank: int | None, host: str | None) -> dict[str, Any]:
    name, message = _exception_of(entry["text"])
    rank = entry.get("rank") if entry.get("rank") is not None else rank
    line = f"{name}: {message}" if message else name
    kind = classify_line(line) or "exception"
    kind = {"signal": "exception", "cancelled": "exception"}.get(kind, kind)
    details: dict[str, Any] = {}
    oom = _OOM_RE.search(line)
    if kind == "cuda_oom" and oom:
        details = {
            "tried_gib": _gib(oom.group(1), oom.group(2)), "gpu": int(oom.group(3)),
            "capacity_gib": _gib(oom.group(4), oom.group(5)), "free_gib": _gib(oom.group(6), oom.group(7)),
            "in_use_gib": _gib(oom.group(8), oom.group(9)), "allocated_gib": _gib(oom.group(10), oom.group(11)),
            "reserved_unallocated_gib": _gib(oom.group(12), oom.group(13)),
        }
    headline = f"{name}: {message[:200]}" if message else name
    if kind == "cuda_oom" and details.get("tried_gib") is not None:
        named = _BACKEND_RE.search(line)
        backend = named.group(1) if named else "CUDA"
        headline = (f"{backend} out of memory: tried to allocate {details['tried_gib']:.2f} GiB on GPU "
                    f"{details['gpu']} ({details['capacity_gib']:.2f} GiB total, {details['free_gib']:.2f} GiB free)")
    watchdog = _WATCHDOG_RE.search(line)
    if watchdog:
        return _watchdog(watchdog, line, host)
    return _cause(kind, headline + _suffix(rank, host), exception=name, message=message, rank=rank, host=host,
                  details=details, evidence=line[:500])


def _from_fatal(event: fatal.Fatal, rank: int | None, host: str | None, exit_code: int | None) -> dict[str, Any]:
    """The cause dict of the event :func:`gputrain.logs.fatal.choose` picked."""
    host = event.host or host
    if event.exception:
        line = f"{event.exception}: {event.message}" if event.message else event.exception
        out = _from_traceback({"text": line, "rank": event.rank}, rank, host)
        if event.kind not in ("exception", "nccl") or out["kind"] in ("exception", "exit_code"):
            # a CUDA OOM the message itself shows wins over the event's reading, a host OOM the words show over it
            out["kind"] = "cuda_oom" if out["kind"] == "cuda_oom" and event.kind != "host_oom" else event.kind
            out["label"] = LABELS.get(out["kind"], out["kind"])
        if event.kind == "cancelled":  # a bare "KeyboardInterrupt" says what happened only to a Python reader
            out["headline"] = f"interrupted (Ctrl-C, SIGINT): {out['headline']}"
        out["headline"] += _HINTS.get(out["kind"], "")
        if out["kind"] == "host_oom" and fatal.POOL_DIED_RE.search(line):
            out["headline"] += " (a worker killed with no word of its own: most often the host's OOM killer)"
        return out
    if event.kind == "nccl_timeout":
        watchdog = _WATCHDOG_RE.search(event.evidence)
        if watchdog:
            return _watchdog(watchdog, event.evidence, host)
    where = event.rank if event.rank is not None else None
    suffix = _suffix(None, host) if where is not None or "rank" in event.headline else _suffix(rank, host)
    details: dict[str, Any] = {"group": event.group}
    headline = event.headline
    if event.kind == "host_oom":
        details["oom_seen_in_log"] = event.group != "launcher"
        if signal_name(exit_code) == "SIGKILL":
            headline += f" (SIGKILL, exit {exit_code})"
    return _cause(event.kind, headline + _HINTS.get(event.kind, "") + suffix,
                  rank=where if where is not None else rank, host=host,
                  evidence=event.evidence, details=details)


def _watchdog(match: re.Match[str], line: str, host: str | None) -> dict[str, Any]:
    rank = int(match.group(1))
    details: dict[str, Any] = {"collective": match.group(3), "seq": int(match.group(2)),
                               "timeout_ms": int(match.group(6)), "ran_ms": int(match.group(7))}
    if match.group(4):
        details["numel"] = int(match.group(4))
    headline = (f"NCCL {details['collective']} (SeqNum {details['seq']}) timed out after "
                f"{int(match.group(6)) / 1000:.0f} s{_suffix(rank, host)}")
    return _cause("nccl_timeout", headline, rank=rank, host=host, details=details, evidence=line.strip()[:500])


def cancel_cause(marker_text: str | None) -> dict[str, Any]:
    """The cause of a job its user cancelled, from its CANCELLED marker (``{"by": ...}``): who asked, nothing
    to fix. What the launcher printed while it was stopped (torchrun's SignalException) is no failure."""
    import json

    by = ""
    try:
        data = json.loads(marker_text or "")
        by = str(data.get("by") or "") if isinstance(data, dict) else ""
    except ValueError:
        pass
    return _cause("cancelled", "cancelled by the user" + (f" ({by})" if by else ""), source="marker",
                  details={"by": by} if by else {})


def root_cause(
    *,
    events: dict[str, str],
    tracebacks: list[dict[str, Any]],
    tail: str,
    exit_code: int | None,
    scheduler_state: str | None = None,
) -> dict[str, Any] | None:
    """The cause of a failure, or None when nothing points to one (a job still running, or one that ended well)."""
    rank, host = _where(tail)
    if scheduler_state in _SLURM_STATES:
        kind, text = _SLURM_STATES[scheduler_state]
        return _cause(kind, text, source="scheduler", details={"state": scheduler_state})
    found = fatal.scan(tail)
    in_tail = {f.exception for f in found if f.exception}
    older = []  # tracebacks from the body of a log larger than its tail: older than anything in the tail
    for entry in tracebacks:
        name, message = _exception_of(entry.get("text") or "")
        if name and name not in in_tail and not _is_launcher(entry["text"]):
            older += [replace(item, line=-1, rank=entry.get("rank"), recovered=False)
                      for item in fatal.scan(f"{name}: {message}" if message else name)]
    root = verdict.choose(older + found, rank if rank is not None else verdict.launcher_rank(found))
    if root is not None:
        return _from_fatal(root, rank, host, exit_code)
    for line in (events.get("nccl", ""), *tail.splitlines()):
        watchdog = _WATCHDOG_RE.search(line)
        if watchdog:
            return _watchdog(watchdog, line, host)
    if "nccl" in events:
        return _cause("nccl", f"NCCL error: {events['nccl'][:200]}{_suffix(rank, host)}", rank=rank, host=host,
                      evidence=events["nccl"])
    if "host_oom" in events or exit_code in (137, -9):
        # The kernel's OOM killer sends SIGKILL (exit 137); slurmstepd says "oom_kill event" when it saw it.
        seen = "host_oom" in events or "Killed" in tail
        evidence = events.get("host_oom") or events.get("signal")
        text = "killed by the host's OOM killer" if seen else "most likely killed by the host's OOM killer"
        return _cause("host_oom", f"{text} (SIGKILL, exit {exit_code}){_suffix(rank, host)}", rank=rank, host=host,
                      evidence=evidence, details={"exit_code": exit_code, "oom_seen_in_log": seen})
    for kind in ("time_limit", "preempted", "cancelled"):
        if kind in events:
            return _cause(kind, LABELS[kind] + f": {events[kind][:200]}", evidence=events[kind])
    launcher = _DS_LAUNCHER_RE.search(tail)
    if signal_name(exit_code):
        return _cause("signal", f"killed by signal {signal_name(exit_code)} (exit code {exit_code})", rank=rank,
                      host=host, details={"exit_code": exit_code})
    if exit_code not in (None, 0) or launcher:
        code = exit_code if exit_code is not None else int(launcher.group(1)) if launcher else None
        return _cause("exit_code", f"exited with code {code}{_suffix(rank, host)}", rank=rank, host=host,
                      details={"exit_code": code})
    return None
