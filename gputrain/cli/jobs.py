"""``gputrain jobs``, ``status``, ``cancel``: every backend's jobs, dispatched on the job's recorded backend.

    gputrain jobs --state RUNNING --backend slurm
    gputrain status local-3
    gputrain cancel 4242

A job is found in the registry (by job id, name or folder); an id the registry does not know is a user
error, and nothing is passed to a scheduler for it. The backend comes from the record
(:mod:`gputrain.backends.table`), so these commands know no backend by name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gputrain.cli import complete
from gputrain.errors import GputrainError, UnknownNameError, UserError, unknown_name

if TYPE_CHECKING:
    from gputrain.registry.store import JobRecord, JobRegistry

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON (errors too, as {\"error\": ...})")]


def find_job(registry: JobRegistry, ref: str) -> JobRecord:
    """The registry's record of ``ref`` (job id, name or folder); unknown is a one-line user error."""
    record = registry.find(ref)
    if record is None:
        raise UnknownNameError(f"no job {ref!r} known to gputrain (job id, name or folder; see `gputrain jobs`)")
    return record


def refresh(records: list[JobRecord], registry: JobRegistry) -> list[JobRecord]:
    """Each backend brings its unfinished records up to date; one that cannot be asked says so on stderr."""
    from gputrain.backends.table import load_backend
    from gputrain.cli.output import warn

    for name in dict.fromkeys(r.backend for r in records):
        try:
            fresh = {r.job_id: r for r in load_backend(name, registry).refresh(records)}
        except GputrainError as exc:
            warn(f"{name} states not refreshed: {exc.message}")
            continue
        records = [fresh.get(r.job_id, r) for r in records]
    return records


def sweep_tasks(registry: JobRegistry, ref: str) -> list[JobRecord]:
    """The points of the --sweep array ``ref`` (its Slurm array id), in task order; none for another id."""
    if not ref.isdigit():
        return []
    tasks = [r for r in registry.list(None, backend="slurm") if (r.extra or {}).get("sweep_id") == ref]
    return sorted(tasks, key=lambda r: int((r.extra or {}).get("array_task", 0)))


def _sweep_matches(record: JobRecord, wanted: str) -> bool:
    """``--sweep train.seed`` matches any point of a sweep over that field; ``train.seed=1`` that point;
    ``--sweep 4242`` every point of the sweep array 4242."""
    if (record.extra or {}).get("sweep_id") == wanted:
        return True
    point = [str(p) for p in (record.extra or {}).get("sweep") or []]
    return any(p == wanted or p.partition("=")[0] == wanted for p in point)


def sweep_table(records: list[JobRecord], metric: str | None) -> tuple[list[str], list[tuple[Any, ...]], str | None]:
    """The sweep summary: one row per point (its values, state, steps) with ``metric``'s last and best value
    from the point's logs (when none is named: the first the points log of val_loss, eval/pass_rate,
    reward_mean, loss)."""
    from gputrain.logs.summarize import summarize

    summaries = []
    for r in records:
        job_dir = Path(r.job_dir) if r.job_dir else None
        summaries.append(summarize(job_dir) if job_dir is not None and job_dir.is_dir() else None)
    if metric is None:
        logged = {k for s in summaries if s for k in s["metrics"]}
        metric = next((k for k in ("val_loss", "eval/pass_rate", "reward_mean", "loss") if k in logged), None)
    header = ["job", "point", "state", "steps", f"{metric} last", f"{metric} best"] if metric else \
        ["job", "point", "state", "steps"]
    rows: list[tuple[Any, ...]] = []
    for r, s in zip(records, summaries, strict=True):
        point = " ".join(str(p) for p in (r.extra or {}).get("sweep") or [])
        steps = (s or {}).get("steps", {}).get("done")
        row: tuple[Any, ...] = (r.job_id, point, r.state, "" if steps is None else steps)
        if metric:
            m = (s or {}).get("metrics", {}).get(metric)
            row += (_num(m["last"]) if m else "", _num(m["best"]) if m and m["best"] is not None else "")
        rows.append(row)
    return header, rows, metric


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def jobs(
    limit: Annotated[int, typer.Option("--limit", "-n", help="how many, newest first", min=1)] = 20,
    state: Annotated[str | None, typer.Option("--state", help="only jobs in this state (RUNNING, FAILED, ...)")] = None,
    backend: Annotated[str | None, typer.Option("--backend", help="only jobs of this backend")] = None,
    recipe: Annotated[str | None, typer.Option("--recipe", help="only jobs of this recipe (by name)")] = None,
    sweep: Annotated[str | None, typer.Option(
        "--sweep", help="only points of a --sweep: a field (train.seed) or one value (train.seed=1)")] = None,
    metric: Annotated[str | None, typer.Option(
        "--metric", help="with --sweep: one row per point with this metric's last and best value")] = None,
    forget: Annotated[bool, typer.Option(
        "--forget", help="remove the matching finished jobs from the registry (never unfinished ones)")] = False,
    refresh_: Annotated[bool, typer.Option("--refresh/--no-refresh", help="ask each backend for live states")] = True,
    json_: JsonOpt = False,
) -> None:
    """Known jobs (all backends), newest first.

    Unfinished jobs are refreshed by their backend (Slurm: one squeue call; --no-refresh: the registry only).
    --forget removes the listed jobs that have finished from the registry; their folders stay on disk.

    \b
    Examples:
      gputrain jobs
      gputrain jobs --state FAILED --backend slurm --json
      gputrain jobs --sweep train.seed --forget
      gputrain jobs --sweep 4242 --metric val_loss
    """
    from gputrain.backends.table import BACKENDS, check_backend_name
    from gputrain.registry.store import FINAL_STATES, STATES, JobRegistry
    from gputrain.registry.transitions import forget_jobs

    if state is not None and state.upper() not in STATES:
        raise UserError(unknown_name("job state", state, STATES))
    state = state.upper() if state else None
    if backend is not None:
        check_backend_name(backend)
    registry = JobRegistry()
    whole = sweep or forget or (state and refresh_)  # filtered after the query: no LIMIT in SQL
    by_sql = registry.list(None if whole else limit, backend=backend, recipe=recipe,
                           state=None if refresh_ else state)
    records = [r for r in by_sql if sweep is None or _sweep_matches(r, sweep)]
    if refresh_:
        records = refresh(records, registry)
    if state is not None:
        records = [r for r in records if r.state == state]
    if forget:
        removed = forget_jobs(registry, (r for r in records if r.state in FINAL_STATES))
        kept = sum(r.state not in FINAL_STATES for r in records)
        if json_:
            print(json.dumps({"forgotten": [r.job_id for r in removed], "kept_unfinished": kept}))
            return
        print(f"forgot {len(removed)} finished job(s)" + (f"; kept {kept} unfinished" if kept else ""))
        return
    if metric is not None and sweep is None:
        raise UserError("--metric needs --sweep (a sweep id or a swept field)")
    if metric is not None:
        print_sweep(records, metric, json_)  # every point: a sweep's table is not cut at --limit
        return
    records = records[:limit]
    if json_:
        print(json.dumps([r.to_dict() for r in records], indent=2))
        return
    if not records:
        known = ", ".join(BACKENDS)
        print("no jobs match" if (state or backend or recipe or sweep) else
              f"no jobs yet (gputrain run / submit / runpod up; backends: {known})")
        return
    from gputrain.cli.output import print_table

    rows = []
    for r in records:
        shape = f"{r.nodes or 1}x{r.gpus_per_node or 0} {r.gpu or ''}".strip()
        cost = (r.extra or {}).get("cost_usd")  # RunPod: billed rate × pod uptime (live while it runs)
        rows.append((r.job_id, r.state, r.exit_code, r.backend, r.cluster, r.recipe, shape,
                     f"${cost:.2f}" if isinstance(cost, (int, float)) else "",
                     r.created_at.replace("+00:00", "Z"), r.job_dir))
    print_table(["job", "state", "exit", "backend", "cluster", "recipe", "shape", "cost", "created", "folder"],
                rows, state_column="state")


def print_sweep(records: list[JobRecord], metric: str | None, as_json: bool) -> None:
    from gputrain.cli.output import print_table

    header, rows, metric = sweep_table(sorted(records, key=lambda r: int((r.extra or {}).get("array_task", 0))),
                                       metric)
    if as_json:
        print(json.dumps({"metric": metric, "points": [dict(zip(header, row, strict=True)) for row in rows]},
                         indent=2))
        return
    print_table(header, rows, state_column="state")


def status(
    job: Annotated[str, typer.Argument(help="job id (4242, local-3, a pod name), job folder, or job name",
                                    autocompletion=complete.jobs)],
    json_: JsonOpt = False,
) -> None:
    """State, reason, exit code, elapsed time and nodes of one job, asked of its backend.

    \b
    Examples:
      gputrain status 4242
      gputrain status local-3 --json
    """
    from gputrain.backends.table import backend_of
    from gputrain.registry.store import JobRegistry

    registry = JobRegistry()
    if registry.find(job) is None and (tasks := sweep_tasks(registry, job)):
        _sweep_status(job, refresh(tasks, registry), json_)
        return
    record = find_job(registry, job)
    info: dict[str, Any] = backend_of(record, registry).status(record.job_id).to_dict()
    info.update(backend=record.backend, job_dir=record.job_dir, recipe=record.recipe, cluster=record.cluster)
    if json_:
        print(json.dumps(info, indent=2))
        return
    for key in ("job_id", "state", "reason", "exit_code", "elapsed", "nodes", "restarts", "backend", "recipe",
                "cluster", "job_dir"):
        value = info.get(key)
        if value not in (None, ""):
            print(f"{key.replace('_', ' '):<10} {value}")


def _sweep_status(sweep_id: str, tasks: list[JobRecord], as_json: bool) -> None:
    """One row per point of a sweep array: its job, state, exit code and point."""
    rows = [{"job_id": r.job_id, "state": r.state, "exit_code": r.exit_code,
             "point": " ".join((r.extra or {}).get("sweep") or []), "job_dir": r.job_dir} for r in tasks]
    if as_json:
        print(json.dumps({"sweep_id": sweep_id, "points": rows}, indent=2))
        return
    from gputrain.cli.output import print_table

    print(f"sweep {sweep_id}: {len(rows)} point(s)")
    print_table(["job", "state", "exit", "point", "folder"],
                [(r["job_id"], r["state"], r["exit_code"], r["point"], r["job_dir"]) for r in rows],
                state_column="state")


def cancel(
    job: Annotated[str, typer.Argument(help="job id (4242, local-3, a pod name), job folder, or job name",
                                    autocompletion=complete.jobs)],
    requeue: Annotated[bool, typer.Option(
        "--requeue", help="Slurm: checkpoint at the next step and go back to the queue instead of ending")] = False,
) -> None:
    """Cancel a pending or running job, on whichever backend runs it.

    A local job ends with every process it started; a Slurm job is scancel'ed (it ends CANCELLED and is
    never requeued); a RunPod job's pod is terminated. A job that has already ended is left as it is
    (exit code 0, said so). --requeue asks a running Slurm job to checkpoint and requeue itself instead.

    \b
    Examples:
      gputrain cancel 4242
      gputrain cancel 4242 --requeue
      gputrain cancel local-3
    """
    from gputrain.backends.table import backend_of
    from gputrain.registry.store import FINAL_STATES, JobRegistry

    registry = JobRegistry()
    if registry.find(job) is None and sweep_tasks(registry, job) and not requeue:
        from gputrain.backends.slurm import SlurmBackend
        from gputrain.backends.slurm_array import cancel_sweep

        ended = cancel_sweep(SlurmBackend(registry), job)
        print(f"cancelled sweep {job}: {len(ended)} unfinished point(s)" if ended
              else f"sweep {job} has ended: nothing to cancel")
        return
    record = find_job(registry, job)
    if record.state in FINAL_STATES:
        print(f"job {record.job_id} already {record.state}: nothing to cancel")
        return
    if requeue:
        from gputrain.backends.slurm import SlurmBackend

        backend = backend_of(record, registry)
        if not isinstance(backend, SlurmBackend):
            raise UserError(f"--requeue: job {record.job_id} runs on {record.backend}; only Slurm jobs requeue")
        backend.cancel(record.job_id, requeue=True)
        print(f"job {record.job_id}: asked to checkpoint at its next step and requeue")
        return
    state = backend_of(record, registry).cancel(record.job_id)
    if state == "CANCELLED":
        print(f"cancelled job {record.job_id} ({record.backend})")
    else:
        print(f"job {record.job_id} already {state}: nothing to cancel")
