"""``gputrain logs JOB|PATH``: show, follow and summarize a job's logs (or any log file).

    gputrain logs 4242                     # last lines of the job's log, found through the registry
    gputrain logs 4242 -f                  # follow until the job ends, then print the summary
    gputrain logs 4242 --rank 1 --grep reward
    gputrain logs 4242 --summary           # (re)write and print job_summary.txt / summary.json / curves.png
    gputrain logs path/to/any.log --summary --json
    gputrain logs "$JOB_DIR" --summary --final --exit-code "$rc"   # what job scripts run at their end

Imports of gputrain.logs, the registry and rich happen inside the command body: ``gputrain --help`` pays
for none of them, and ``--json`` never imports rich.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gputrain.cli import complete
from gputrain.contract.jobstate import ENDED_STATES
from gputrain.errors import GputrainError, LogError

if TYPE_CHECKING:
    from collections.abc import Callable

    from gputrain.doctor.remedy import Remedy
    from gputrain.registry.store import JobRecord

TERMINAL = ENDED_STATES


class NotStarted(Exception):
    """The job has no output to show yet; the message says why (PENDING and its reason, or no output)."""


def resolve_target(ref: str) -> tuple[Path, JobRecord | None]:
    """A path (job folder or log file) works without the registry; anything else is looked up there."""
    from gputrain.logs.display import require_regular_file

    path = Path(ref).expanduser()
    if path.exists():
        if not path.is_dir():
            require_regular_file(path)  # /dev/zero, a FIFO: refused before anything opens them
        return path, _find_record(str(path) if path.is_dir() else None)  # find() tries resolved spellings
    record = _find_record(ref)
    if record is None:
        raise LogError(f"{ref}: no such file, folder or job (see `gputrain jobs`)")
    if record.state == "PENDING" and not _recorded_output(record):  # a stale PENDING (controller down): show it
        raise NotStarted(pending_message(record))
    from gputrain.backends.table import backend_of

    job_dir = backend_of(record).logs_location(record)
    if job_dir is None:
        raise LogError(f"job {record.job_id} has no job folder recorded in the registry")
    if not job_dir.is_dir():
        raise LogError(f"job {record.job_id}: job folder {job_dir} is missing")
    return job_dir, record


def _recorded_output(record: JobRecord) -> bool:
    return bool(record.job_dir) and Path(str(record.job_dir)).is_dir() and _has_output(Path(str(record.job_dir)))


def pending_message(record: JobRecord) -> str:
    """``job 4242 is PENDING (Resources): no output yet``: the reason from the registry, else its backend."""
    reason = (record.extra or {}).get("reason") or _backend_reason(record)
    return f"job {record.job_id} is PENDING{f' ({reason})' if reason else ''}: no output yet"


def _backend_reason(record: JobRecord) -> str | None:
    from gputrain.backends.table import backend_of

    try:
        return backend_of(record).status(record.job_id).reason or None
    except GputrainError:
        return None


def world_size(job_dir: Path | None, record: JobRecord | None) -> int | None:
    """The job's number of ranks: plan.json, else the registry, else torchrun's per-rank folders."""
    if job_dir is not None:
        from gputrain.logs.jsonfile import read_json_object

        plan = read_json_object(job_dir / "plan.json", warn=False)
        if plan is not None and isinstance(plan.get("world_size"), int):
            return int(plan["world_size"])
    size = (record.extra or {}).get("world_size") if record is not None else None
    if isinstance(size, int):
        return size
    if job_dir is not None:
        ranks = {p.parent.name for p in job_dir.glob("*/attempt_*/*/std*.log") if p.parent.name.isdigit()}
        if ranks:
            return len(ranks)
    return None


def _find_record(ref: str | None) -> JobRecord | None:
    if ref is None:
        return None
    try:
        from gputrain.registry.store import JobRegistry

        return JobRegistry().find(ref)
    except (ImportError, GputrainError):
        return None


class Backoff:
    """Say when a costly question (a scheduler query) is due again: after ``first`` seconds, then each wait
    ``factor`` times longer, up to ``most``. ``logs -f`` asked Slurm every 0.5 s (38 calls in 20 s); a job
    that ends writes its final summary, which is read at every poll, so the scheduler is only the fallback
    for a job killed before it could write one."""

    def __init__(self, first: float = 2.0, factor: float = 1.5, most: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.wait, self.factor, self.most, self.clock = first, factor, most, clock
        self.next = clock() + first

    def due(self) -> bool:
        now = self.clock()
        if now < self.next:
            return False
        self.wait = min(self.most, self.wait * self.factor)
        self.next = now + self.wait
        return True


def job_finished(job_dir: Path | None, record: JobRecord | None,
                 backoff: Backoff | None = None) -> Callable[[], bool]:
    """Has the job ended? Final summary written by the job script, registry state (both read at every
    poll), then the backend itself (local pid, Slurm), asked with :class:`Backoff`."""
    backoff = backoff or Backoff()

    def finished() -> bool:
        if job_dir is not None:
            from gputrain.logs.jsonfile import read_json_object

            summary = read_json_object(job_dir / "summary.json", warn=False)  # polled: no warning each time
            if summary is not None and summary.get("final"):
                return True
        if record is None:
            return False
        fresh = _find_record(record.job_id) or record
        if fresh.state in TERMINAL:
            return True
        if not backoff.due():
            return False
        from gputrain.backends.table import backend_of

        try:  # the backend's own answer: a local supervisor that died, a Slurm job that left the queue
            state = backend_of(fresh).status(fresh.job_id).state
        except GputrainError:
            return False
        return state in TERMINAL or state == "UNKNOWN"

    return finished


def _print_summary(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
        return
    from gputrain.logs.display import safe_data, safe_lines

    if sys.stdout.isatty() and not os.environ.get("NO_COLOR"):
        from gputrain.logs.report import print_rich

        print_rich(safe_data(summary))
    else:
        from gputrain.logs.report import render_text

        sys.stdout.write(safe_lines(render_text(summary)))


def _log_paths(target: Path) -> list[Path]:
    from gputrain.logs.summarize import find_logs

    if target.is_file():
        return [target]
    from gputrain.logs.display import require_regular_file

    logs = find_logs(target)
    if not logs:
        raise LogError(f"{target}: no log file in this job folder (expected training_output.log)")
    return [require_regular_file(p) if p.exists() else p for p in logs]


def logs_command(
    target: str = typer.Argument(..., help="Job id, job name, job folder or log file.",
                                 autocompletion=complete.jobs),
    follow: bool = typer.Option(False, "--follow", "-f", help="Stream new lines until the job ends."),
    rank: int | None = typer.Option(None, "--rank", help="Only this rank's lines (and metrics)."),
    grep: str | None = typer.Option(None, "--grep", help="Only lines matching this regular expression."),
    lines: int = typer.Option(40, "--lines", "-n", help="How many last lines to show."),
    summary: bool = typer.Option(False, "--summary", help="(Re)write and print the job summary."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON (implies --summary)."),
    final: bool = typer.Option(False, "--final", help="Record the job's final state (job scripts)."),
    fix: bool = typer.Option(False, "--fix", help="What to change for a failed job, and the command that reruns it."),
    exit_code: int | None = typer.Option(None, "--exit-code", help="The job's exit code, with --final."),
) -> None:
    """Show, follow or summarize a job's logs.

    TARGET is a job id or name (from `gputrain jobs`), a job folder, or any log file (HF Trainer,
    Lightning, verl, torchrun, tqdm).

    \b
    Examples:
      gputrain logs 4242                     # last lines, found through the job registry
      gputrain logs 4242 -f                  # follow until the job ends, then the summary
      gputrain logs 4242 --rank 1 --grep reward
      gputrain logs path/to/any.log --summary --json
    """
    import re

    from gputrain.logs.follow import LineFilter
    from gputrain.logs.follow import follow as follow_lines
    from gputrain.logs.summarize import summarize

    if final and exit_code is None:
        raise LogError("--final needs --exit-code N (the job's exit status)")
    if rank is not None and rank < 0:
        raise LogError(f"--rank {rank}: a rank is 0 or more", exit_code=2)
    try:
        pattern = re.compile(grep) if grep else None
    except re.error as exc:
        raise LogError(f"--grep {grep!r}: invalid regular expression ({exc})", exit_code=2) from None
    if _sweep_summary(target, as_json):
        return
    try:
        path, record = resolve_target(target)
    except NotStarted as exc:
        print(exc)
        return
    job_dir = path if path.is_dir() else None
    size = world_size(job_dir, record)
    if rank is not None and size is not None and rank >= size:
        raise LogError(f"--rank {rank}: job has {size} rank(s), 0-{size - 1}", exit_code=2)
    line_filter = LineFilter(rank, pattern)
    state = record.state if record is not None and record.state in TERMINAL | {"RUNNING", "PENDING"} else None
    if fix:
        _print_fix(summarize(path, rank=rank, state=state), job_dir, record, as_json)
        return
    if not (final or as_json) and job_dir is not None and not _has_output(job_dir):
        print(f"{record.job_id if record else job_dir.name}: no output yet ({state or 'state unknown'})")
        if not follow:
            return

    if follow:
        paths = _log_paths(path) if job_dir is None or _has_output(job_dir) else []
        shown: deque[str] = deque(maxlen=200)

        from gputrain.cli.progress import job_echo

        with job_echo(sys.stdout) as echo:  # on a terminal, the phase the job is in (#31)

            def emit(text: str) -> None:
                shown.append(text)
                echo.write(text + "\n")
                echo.flush()

            try:
                follow_lines(paths, emit, job_finished(job_dir, record), line_filter=line_filter,
                             initial_lines=lines)
            except KeyboardInterrupt:
                pass
        # The job script prints its final summary into the log being followed: do not print it again.
        summary = (summary or job_dir is not None) and not _summary_already_shown(job_dir, shown)
    elif not (summary or as_json or final):
        _show_lines(_log_paths(path), line_filter, lines, scan_all=pattern is not None)
        return
    if summary or as_json or final:
        result = summarize(path, rank=rank, final=final, exit_code=exit_code, state=state)
        if job_dir is not None:
            from gputrain.doctor.annotate import annotate

            annotate(result, job_dir, slurm_job_id=_slurm_id(record))
        else:
            _bare_remedy(result)
        _print_summary(result, as_json)


def _sweep_summary(target: str, as_json: bool) -> bool:
    """``gputrain logs SWEEP_ID``: the sweep's table (one row per point) instead of one job's log."""
    if Path(target).exists() or not target.isdigit():
        return False
    from gputrain.cli.jobs import print_sweep, refresh, sweep_tasks
    from gputrain.registry.store import JobRegistry

    registry = JobRegistry()
    points = sweep_tasks(registry, target)
    if not points:
        return False
    print_sweep(refresh(points, registry), None, as_json)
    return True


def _slurm_id(record: JobRecord | None) -> str | None:
    """The id to ask Slurm's accounting about (the efficiency report), for a Slurm job that ran."""
    return record.job_id if record is not None and record.backend == "slurm" else None


def _bare_remedy(summary: dict[str, Any]) -> Remedy | None:
    """The remedy of a log file with no job around it: from its cause alone (no plan to compute numbers from)."""
    from gputrain.doctor import prescribe

    remedy = prescribe(summary, None)
    if remedy is not None and isinstance(summary.get("root_cause"), dict):
        summary["root_cause"]["remedy"] = remedy.as_dict()
    return remedy


def _print_fix(summary: dict[str, Any], job_dir: Path | None, record: JobRecord | None, as_json: bool) -> None:
    """``logs JOB --fix``: the cause, the remedy computed from the job's plan, and the command to rerun; for a
    bare log file, the remedy its cause alone gives (no plan, so no rerun command)."""
    from gputrain.doctor import rerun_command
    from gputrain.doctor.annotate import annotate, job_plan
    from gputrain.logs.display import safe_lines
    from gputrain.logs.report import headline

    if job_dir is None:
        remedy, plan = _bare_remedy(summary), None
    else:
        remedy = annotate(summary, job_dir, slurm_job_id=_slurm_id(record))
        plan = job_plan(job_dir)
    ref = record.job_id if record is not None else str(job_dir or summary.get("target"))
    command = rerun_command(plan, remedy, ref) if plan is not None and remedy is not None else None
    if as_json:
        sys.stdout.write(json.dumps({"job": ref, "state": summary.get("state"), "root_cause": summary.get("root_cause"),
                                     "remedy": remedy.as_dict() if remedy else None, "command": command,
                                     "predicted_vs_measured": summary.get("predicted_vs_measured", {})}, indent=2)
                         + "\n")
        return
    out = [headline(summary)]
    if remedy is None:
        out.append("nothing to fix: no failure was found in this job's logs")
    else:
        out.append(f"fix: {remedy.text}")
    for key, pair in (summary.get("predicted_vs_measured") or {}).items():
        out.append(f"{key}: predicted {pair['predicted']:g}, measured {pair['measured']:g}")
    if command is not None:
        out += ["rerun (resumes from the newest checkpoint):", f"  {command}"]
    elif remedy is not None and job_dir is None:
        out.append("a log file, not a job: apply the change above where the run is configured, then rerun")
    elif remedy is not None:
        out.append("no plan.json in the job folder: rerun it yourself with the change above")
    sys.stdout.write(safe_lines("\n".join(out) + "\n"))


def _has_output(job_dir: Path) -> bool:
    from gputrain.logs.summarize import find_logs

    return any(p.is_file() and p.stat().st_size > 0 for p in find_logs(job_dir))


def _summary_already_shown(job_dir: Path | None, shown: deque[str]) -> bool:
    if job_dir is None:
        return False
    try:
        headline = (job_dir / "job_summary.txt").read_text(encoding="utf-8").splitlines()[0]
    except (OSError, IndexError, UnicodeDecodeError):
        return False
    return any(line.strip() == headline.strip() for line in shown)


def _show_lines(paths: list[Path], line_filter: Any, n: int, scan_all: bool) -> None:
    """Last ``n`` lines; with --grep, every matching line of the whole file (streamed, bounded memory)."""
    from gputrain.logs.display import require_regular_file
    from gputrain.logs.follow import Tail, _file_rank, display_line

    for path in paths:
        if not path.exists():
            raise LogError(f"{path}: no such log file")
        require_regular_file(path)
        file_rank = _file_rank(path) if len(paths) > 1 else None
        tail = Tail(path, file_rank)
        raws = tail.read() if scan_all else tail.open(n)
        if scan_all and tail.partial:
            raws.append(tail.partial)
        tail.close()
        for raw in raws:
            line = display_line(raw)
            if line_filter(line, file_rank):
                print(line if file_rank is None else f"[rank{file_rank}]: {line}")


def register(app: typer.Typer) -> None:
    """Add ``logs`` to ``app`` (for embedding; ``gputrain`` itself uses :data:`gputrain.cli.app.COMMANDS`)."""
    app.command("logs")(logs_command)
