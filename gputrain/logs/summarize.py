"""Job folder (or any log file) → ``summary.json``, ``job_summary.txt`` and ``curves.png``.

What a person wants in ten seconds: did it finish, why not, how far, how fast, how much it cost, where
the loss went. Sources, in a job folder (layout in CONTRACTS.md): ``metrics.jsonl`` (our trainings; the
metrics come from there when it exists), ``training_output.log`` or other ``*.log``/``*.out``/``*.err``
files and torchrun's per-rank ``*/attempt_*/<rank>/std{out,err}.log`` (progress, failure messages,
tracebacks, other tools' metrics), ``plan.json`` (hardware, planned steps, hourly rate), ``PREEMPTED``,
``checkpoints/`` and ``result.json``.

Re-summarizing reads only new bytes: scanner offsets and statistics persist in ``.summary_state.json``.
The job script calls ``gputrain logs "$JOB_DIR" --summary --final --exit-code "$rc"`` at its end; that call
records the final state, which later on-demand summaries keep.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputrain.atomic import write_atomic
from gputrain.contract.jobstate import CANCELLED, CANCELLED_MARKER, ENDED_STATES, markers_in
from gputrain.errors import GputrainError, LogError
from gputrain.logs.catalog import group_rank
from gputrain.logs.causes import cancel_cause, root_cause
from gputrain.logs.classify import PRIORITY, classify_failure
from gputrain.logs.jsonfile import MAX_JSON_BYTES, plain_file
from gputrain.logs.scan import LogScanner
from gputrain.logs.schema import METRICS_FILE, validate_record
from gputrain.logs.stats import MetricTable
from gputrain.logs.verdict import infer_end
from gputrain.logs.views import (
    SCHEDULER_FAILURES,
    curve_keys,
    loss_scale_alerts,
    metric_entry,
    nonfinite_alerts,
    rl_view,
    traceback_for,
)

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan

STATE_FILE = ".summary_state.json"
STATE_VERSION = 2
LOG_NAMES = ("training_output.log",)
LOG_SUFFIXES = (".log", ".out", ".err")
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def atomic_write(path: Path, data: str | bytes) -> None:
    """Summaries are meant to be shared: the user's umask applies, not mkstemp's 0600."""
    write_atomic(path, data, 0o666 & ~_UMASK)


def find_logs(job_dir: Path) -> list[Path]:
    """The job's log files: ``training_output.log`` when present, else every log-like file."""
    named = [job_dir / n for n in LOG_NAMES if (job_dir / n).is_file()]
    if named:
        return named
    found = sorted(p for p in job_dir.iterdir() if p.is_file() and p.suffix in LOG_SUFFIXES)
    found += sorted(job_dir.glob("*/attempt_*/*/std*.log"))
    return found


def _read_json(path: Path) -> dict[str, Any] | None:
    """A job folder's JSON file: regular files only, bounded size and depth (``gputrain.logs.jsonfile``)."""
    from gputrain.logs.jsonfile import read_json_object

    return read_json_object(path)


class MetricsCursor:
    """Incremental reader of ``metrics.jsonl``: complete lines only, from a saved offset."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.inode, self.table = path, 0, 0, MetricTable()

    def scan(self) -> None:
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - closed by the with below
        except OSError:
            return
        with fh:
            st = os.fstat(fh.fileno())
            if st.st_ino != self.inode or st.st_size < self.offset:
                self.offset, self.inode, self.table = 0, st.st_ino, MetricTable()
            fh.seek(self.offset)
            while raw := fh.readline(1 << 20):
                if not raw.endswith(b"\n"):
                    if len(raw) < 1 << 20:
                        break  # a record still being written: read it next time
                    while raw and not raw.endswith(b"\n"):
                        self.offset += len(raw)
                        raw = fh.readline(1 << 20)
                self.offset += len(raw)
                try:
                    record = validate_record(json.loads(raw))
                except ValueError:
                    continue
                if record is not None:
                    values = {k: float(v) for k, v in record.items() if k not in ("step", "time")}
                    self.table.add(record["step"], values, float(record["time"]))

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "inode": self.inode, "table": self.table.to_json()}

    def load(self, data: dict[str, Any]) -> None:
        self.offset, self.inode = int(data["offset"]), int(data["inode"])
        self.table = MetricTable.from_json(data["table"])


def summarize(
    target: str | os.PathLike[str],
    *,
    rank: int | None = None,
    final: bool = False,
    exit_code: int | None = None,
    state: str | None = None,
    write: bool = True,
    now: float | None = None,
) -> dict[str, Any]:
    """Summary of a job folder or a single log file; writes the summary files into a job folder."""
    path = Path(target)
    if not path.exists():
        raise LogError(f"{path}: no such job folder or log file")
    now = time.time() if now is None else now
    job_dir = path if path.is_dir() else None
    logs = find_logs(path) if job_dir else [path]
    saved = _read_json(path / STATE_FILE) if job_dir else None
    if saved is None or saved.get("version") != STATE_VERSION or saved.get("rank") != rank:
        saved = {}
    scanners: list[LogScanner] = []
    changed = final or not saved
    for log in logs:
        old = saved.get("logs", {}).get(str(log))
        scanner = LogScanner.from_json(old) if old else LogScanner(log, rank=rank)
        changed = scanner.scan() > 0 or changed or not old
        scanners.append(scanner)
    cursor = MetricsCursor(path / METRICS_FILE) if job_dir else None
    if cursor is not None:
        if saved.get("metrics"):
            cursor.load(saved["metrics"])
        before = cursor.offset
        cursor.scan()
        changed = changed or cursor.offset != before
    plan = read_plan(job_dir) if job_dir else None
    prior_final = saved.get("final")
    if final:
        events, _, _ = _events(scanners)
        end_state, cause = classify_failure(exit_code, events, markers_in(job_dir))
        prior_final = {"state": end_state, "exit_code": exit_code, "cause": cause, "end": now}
    summary = _build(path, job_dir, [s.provisional() for s in scanners], cursor, plan, prior_final, state, now)
    if write and job_dir is not None:
        new_state = {
            "version": STATE_VERSION,
            "rank": rank,
            "final": prior_final,
            "logs": {str(s.path): s.to_json() for s in scanners},
            "metrics": cursor.to_json() if cursor else None,
        }
        atomic_write(job_dir / STATE_FILE, json.dumps(new_state))
        table = cursor.table if cursor and cursor.table.records else _log_table(scanners)
        write_summary_files(job_dir, summary, table, curves=changed or not (job_dir / "curves.png").exists())
    return summary


def _marker_text(job_dir: Path | None, marker: str) -> str | None:
    try:
        return (job_dir / marker).read_text(encoding="utf-8") if job_dir is not None else None
    except OSError:
        return None


def write_summary_files(job_dir: Path, summary: dict[str, Any], table: MetricTable, curves: bool = True) -> None:
    from gputrain.logs.plot import write_curves
    from gputrain.logs.report import render_text

    png = job_dir / "curves.png"
    name = summary["name"] if summary["name"] == job_dir.name else f"{summary['name']} ({job_dir.name})"
    title = f"{name}  {summary['state']}"
    if (curves and write_curves(table, png, title=title)) or png.exists():
        summary["curves"] = str(png)
    atomic_write(job_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    atomic_write(job_dir / "job_summary.txt", render_text(summary))


def _events(scanners: list[LogScanner]) -> tuple[dict[str, str], list[dict[str, Any]], str]:
    """Failure events, tracebacks (body and tail, in log order, deduplicated) and the tail text of the logs."""
    events: dict[str, str] = {}
    tracebacks: list[dict[str, Any]] = []
    tails: list[str] = []
    for scanner in scanners:
        events.update(scanner.events)
        tail_events, tail_tbs = scanner.tail()
        events.update(tail_events)
        seen = {tb["text"] for tb in scanner.tracebacks}
        tracebacks += scanner.tracebacks + [tb for tb in tail_tbs if tb["text"] not in seen]
        tails.append(scanner.tail_text())
    return events, tracebacks, "\n".join(tails)


def read_plan(job_dir: Path) -> JobPlan | None:
    """The job's plan through the contract; a plan.json it cannot read (another gputrain's, damaged) gives
    a summary without plan facts and one warning line, never a failure: foreign logs must summarize."""
    if not (job_dir / "plan.json").exists():
        return None
    from gputrain.contract.plan import load_job_plan

    if not plain_file(job_dir / "plan.json"):  # a link, a device, a FIFO, too large: never read
        print(f"gputrain: warning: {job_dir / 'plan.json'}: not a regular file of at most "
              f"{MAX_JSON_BYTES >> 20} MiB (summary without plan information)", file=sys.stderr)
        return None
    try:
        return load_job_plan(job_dir / "plan.json")
    except GputrainError as exc:
        print(f"gputrain: warning: {exc} (summary without plan information)", file=sys.stderr)
    except RecursionError:
        print(f"gputrain: warning: {job_dir / 'plan.json'}: JSON nested too deep (summary without plan "
              "information)", file=sys.stderr)
    return None


def _log_table(scanners: list[LogScanner]) -> MetricTable:
    """The table of the log with the most metric records, its x axis in steps (HF dicts log epochs)."""
    best = max(scanners, key=lambda s: s.table.records + s.hf_table.records, default=None)
    return MetricTable() if best is None else best.metric_table()


def _iso(stamp: float | None) -> str | None:
    return None if stamp is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))


def _build(
    path: Path,
    job_dir: Path | None,
    scanners: list[LogScanner],
    cursor: MetricsCursor | None,
    plan: JobPlan | None,
    final: dict[str, Any] | None,
    state: str | None,
    now: float,
) -> dict[str, Any]:
    table = cursor.table if cursor is not None and cursor.table.records else _log_table(scanners)
    events, tracebacks, tail = _events(scanners)
    progress: dict[str, float] = {}
    for scanner in scanners:
        progress.update(scanner.progress)

    exit_code = final.get("exit_code") if final else None
    evidence: str | None = None
    scheduler_state = state if state in SCHEDULER_FAILURES else None
    if final:
        state, cause = (scheduler_state or final["state"]), final["cause"]
    else:
        if state is None:  # nothing recorded the end (a log someone else wrote): read it off the log itself
            inferred = infer_end(tail)
            state, evidence = inferred if inferred else ("UNKNOWN", None)
        cause = next((c for c in PRIORITY if c in events), None) if state not in ("COMPLETED",) else None
    ended = final is not None or state in ENDED_STATES or evidence is not None  # the log itself showed its end
    failed = state not in ("COMPLETED", "RUNNING", "PENDING") and (ended or cause is not None or bool(tracebacks))
    if state == CANCELLED and failed and evidence is None:  # a user's cancel, whatever the launcher printed
        # as it was stopped; a cancel read off the log itself (Ctrl-C's KeyboardInterrupt) is named by the log
        why: dict[str, Any] | None = cancel_cause(_marker_text(job_dir, CANCELLED_MARKER))
    else:
        why = (
            root_cause(events=events, tracebacks=tracebacks, tail=tail, exit_code=exit_code,
                       scheduler_state=scheduler_state)
            if failed
            else None
        )
    if why is not None:
        cause = why["kind"]
    log_mtimes = [s.path.stat().st_mtime for s in scanners if s.path.exists()]
    start = table.first_time
    if start is None and job_dir is not None and (job_dir / "plan.json").exists():
        start = (job_dir / "plan.json").stat().st_mtime
    end = final["end"] if final else (max(log_mtimes, default=None) if ended else None)
    duration = ((end if end is not None else now) - start) if start is not None else None

    done = max(table.max_step, int(progress.get("step", -1)))
    planned = (
        (plan and (plan.estimate.total_steps or plan.recipe.train.max_steps)) or progress.get("total")
    )
    planned = int(planned) if planned else None
    steps_per_hour = None
    if table.first_time is not None and table.last_time and table.last_time > table.first_time:
        first_step = min((m.first[0] for m in table.metrics.values()), default=0.0)
        steps_per_hour = (table.max_step - first_step) / (table.last_time - table.first_time) * 3600
    elif progress.get("steps_per_s"):
        steps_per_hour = progress["steps_per_s"] * 3600
    eta = None
    if not ended and planned and steps_per_hour and done >= 0:
        eta = max(0.0, (planned - done) / steps_per_hour * 3600)

    gpus = plan.world_size if plan else 0
    rate = plan.estimate.gpu_hourly_usd if plan else None
    gpu_hours = duration / 3600 * gpus if duration is not None and gpus else None
    rl = rl_view(table)
    metrics = {key: metric_entry(key, table, rl is not None) for key in sorted(table.metrics, key=group_rank)}
    throughput = {
        k: table.metrics[k].median() for k in ("tokens_per_s", "samples_per_s") if k in table.metrics
    }
    mem = table.metrics.get("gpu_mem_gib")
    checkpoints = (
        sorted(p.name for p in (job_dir / "checkpoints").iterdir())
        if job_dir is not None and (job_dir / "checkpoints").is_dir()
        else []
    )
    result = _read_json(job_dir / "result.json") if job_dir is not None else None
    perf = _read_json(job_dir / "perf.json") if job_dir is not None else None  # written when the run closes
    summary: dict[str, Any] = {
        "version": STATE_VERSION,
        "target": str(path),
        "name": plan.recipe.name if plan else (job_dir.name if job_dir else path.name),
        "job_dir": str(job_dir) if job_dir else None,
        "state": state,
        "state_inferred": evidence is not None,
        "state_evidence": evidence,
        "final": final is not None,
        "exit_code": exit_code,
        "cause": cause,
        "cause_label": why["label"] if why else None,
        "failure": why["headline"] if why else None,
        "root_cause": why,
        "events": events,
        "traceback": traceback_for(why, tracebacks),
        "start": _iso(start),
        "end": _iso(end),
        "duration_s": duration,
        "hardware": {
            "gpu": plan.gpu.name,
            "gpus_per_node": plan.gpus_per_node,
            "nodes": plan.nodes,
            "world_size": plan.world_size,
        }
        if plan
        else None,
        "rl": rl,
        "sampled": {"bytes_skipped": table.skipped} if table.skipped else None,
        "steps": {"done": done if done >= 0 else None, "planned": planned},
        "steps_per_hour": steps_per_hour,
        "eta_s": eta,
        "throughput": throughput,
        "compile_seconds": (perf or {}).get("compile_seconds"),  # start-up: not in the step time (#27)
        "warmup_seconds": (perf or {}).get("warmup_seconds"),  # the warm-up steps' wall time, compile included
        "peak_gpu_mem_gib": mem.hi[1] if mem else None,
        "cost": {
            "gpu_hours": gpu_hours,
            "gpu_hourly_usd": rate,
            "usd": gpu_hours * rate if gpu_hours is not None and rate is not None else None,
        },
        "checkpoints": checkpoints,
        "result": result,
        "metrics": metrics,
        "alerts": nonfinite_alerts(metrics) + loss_scale_alerts(tail),
        "series": {k: table.metrics[k].series for k in curve_keys(table)},
        "ranks": sorted({r for s in scanners for r in s.ranks}),
        "sources": {
            "metrics": str(cursor.path) if cursor and cursor.table.records else None,
            "logs": [str(s.path) for s in scanners],
            "formats": {k: v for s in scanners for k, v in s.formats.items()},
        },
        "updated_at": _iso(now),
    }
    pod_run = _read_json(job_dir / "runpod.json") if job_dir is not None else None
    if pod_run and isinstance(pod_run.get("attempts"), list):  # `runpod up --retry`: one pod per attempt
        summary["runpod"] = {"attempts": [a for a in pod_run["attempts"] if isinstance(a, dict)]}
    return summary
