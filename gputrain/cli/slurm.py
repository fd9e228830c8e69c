"""Slurm commands: ``submit``, ``jobs``, ``status``, ``cancel``, ``clusters``.

    gputrain submit recipes/selftest.yaml --cluster testbed --nodes 2 --gpus 1
    gputrain jobs
    gputrain status 4242
    gputrain cancel 4242

Bodies import what they need (planner, backend, registry), so ``gputrain --help`` stays cheap.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gputrain.errors import ClusterError

if TYPE_CHECKING:
    from gputrain.registry.store import JobRecord

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of text")]


def register(app: typer.Typer) -> None:
    app.command("submit")(submit)
    app.command("jobs")(jobs)
    app.command("status")(status)
    app.command("cancel")(cancel)
    app.command("clusters")(clusters)


def submit(
    recipe: Annotated[str, typer.Argument(help="recipe file, or the name of a bundled recipe")],
    cluster: Annotated[str | None, typer.Option("--cluster", help="cluster profile ($GPUTRAIN_CLUSTER)")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU type; default: the cluster's")] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", help="GPUs per node", min=1)] = None,
    nodes: Annotated[int | None, typer.Option("--nodes", help="number of nodes", min=1)] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a field: a.b=value")] = None,
    sweep: Annotated[list[str] | None, typer.Option(
        "--sweep", help="one job per value: a.b=v1,v2,... (repeat the option for a grid)")] = None,
    preset: Annotated[str | None, typer.Option("--preset", help="named preset of the GPU profile")] = None,
    logs_dir: Annotated[Path, typer.Option("--logs-dir", help="where job folders go")] = Path("logs"),
    dry_run: Annotated[bool, typer.Option("--dry-run", help="write the job folder, do not submit")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="NCCL_DEBUG=INFO, TORCH_DISTRIBUTED_DEBUG")] = False,
    no_cache: Annotated[bool, typer.Option(
        "--no-cache", help="plan again even if this exact command was submitted before with the same inputs")] = False,
    json_: JsonOpt = False,
) -> None:
    """Plan a recipe for a Slurm cluster, write its job folder and sbatch it (recorded in `gputrain jobs`).

    --sweep submits one job per value (a grid when repeated); every job is planned before any is submitted.
    An identical earlier command whose recipe, profiles and gputrain are unchanged is replayed without
    planning again (see gputrain.cli.submit_cache; --no-cache turns that off).
    """
    from gputrain.backends.slurm import prepare_job
    from gputrain.cli import submit_cache
    from gputrain.cli.core import resolve_recipe_path
    from gputrain.hardware.clusters import config_path
    from gputrain.planner import make_plan
    from gputrain.recipe.loader import expand_sweeps, extends_chain

    cluster = cluster or os.environ.get("GPUTRAIN_CLUSTER")
    if not cluster:
        from gputrain.hardware.clusters import list_clusters

        names = ", ".join(c.name for c in list_clusters())
        raise ClusterError(f"--cluster is required (or set GPUTRAIN_CLUSTER); known clusters: {names}")
    recipe_path = resolve_recipe_path(recipe)
    jobs = []
    detected = False
    for point in expand_sweeps(sweep or []):
        plan = make_plan(recipe_path, gpu=gpu, gpus_per_node=gpus, nodes=nodes, cluster=cluster,
                         overrides=[*(set_ or []), *point], preset=preset, target="slurm")
        detected = detected or (not gpu and not (plan.cluster or {}).get("gpu"))
        view = {"json": json_, "dry_run": dry_run, "debug": debug, "warnings": list(plan.warnings),
                "recipe": plan.recipe.name, "cluster": cluster, "sweep": bool(sweep), "point": point,
                "shape": f"{plan.nodes} node(s) x {plan.gpus_per_node} {plan.gpu.name}"}
        jobs.append((prepare_job(plan, logs_dir=logs_dir, debug=debug, sweep=point), view))
    argv = sys.argv[2:]
    # a plan of the local GPU may change with the machine: only plans from named GPUs are kept
    if not (no_cache or detected) and sys.argv[1:2] == ["submit"] and submit_cache.enabled(argv):
        submit_cache.store(argv, jobs, [Path(recipe), *extends_chain(recipe_path), config_path()])
    submit_cache.submit_all(jobs)


def _refresh(records: list[JobRecord]) -> list[JobRecord]:
    from gputrain.backends.slurm import SlurmBackend
    from gputrain.errors import RegistryError

    try:
        return SlurmBackend().refresh(records)
    except (ClusterError, RegistryError) as exc:  # a read-only $GPUTRAIN_HOME still lists its jobs
        print(f"warning: states not refreshed: {exc}", file=sys.stderr)
        return records


def jobs(
    limit: Annotated[int, typer.Option("--limit", "-n", help="how many, newest first", min=1)] = 20,
    refresh: Annotated[bool, typer.Option("--refresh/--no-refresh", help="ask Slurm for live states")] = True,
    json_: JsonOpt = False,
) -> None:
    """Known jobs (all backends), newest first; Slurm states refreshed with one squeue call."""
    from gputrain.registry.store import JobRegistry

    records = JobRegistry().list(limit)
    if refresh:
        records = _refresh(records)
    if json_:
        print(json.dumps([r.to_dict() for r in records], indent=2))
        return
    if not records:
        print("no jobs yet (gputrain submit RECIPE --cluster NAME)")
        return
    rows = [("JOB", "STATE", "EXIT", "BACKEND", "CLUSTER", "RECIPE", "SHAPE", "CREATED", "FOLDER")]
    for r in records:
        shape = f"{r.nodes or 1}x{r.gpus_per_node or 0} {r.gpu or ''}".strip()
        exit_code = "-" if r.exit_code is None else str(r.exit_code)
        rows.append((r.job_id, r.state, exit_code, r.backend, r.cluster or "-", r.recipe or "-", shape,
                     r.created_at.replace("+00:00", "Z"), r.job_dir or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1])


def status(
    job: Annotated[str, typer.Argument(help="Slurm job id, job folder, or job name")],
    json_: JsonOpt = False,
) -> None:
    """State, reason, exit code, elapsed time and nodes of one job."""
    from gputrain.backends.slurm import SlurmBackend
    from gputrain.registry.store import JobRegistry

    registry = JobRegistry()
    record = registry.find(job)
    job_id = record.job_id if record else job
    if record is not None and record.backend != "slurm":
        info: dict[str, Any] = {"job_id": record.job_id, "state": record.state, "exit_code": record.exit_code,
                                "backend": record.backend}
    else:
        info = SlurmBackend(registry).status(job_id).to_dict()
    if record is not None:
        info.update(job_dir=record.job_dir, recipe=record.recipe, cluster=record.cluster)
    if json_:
        print(json.dumps(info, indent=2))
        return
    for key in ("job_id", "state", "reason", "exit_code", "elapsed", "nodes", "restarts", "recipe", "cluster",
                "job_dir"):
        value = info.get(key)
        if value not in (None, ""):
            print(f"{key.replace('_', ' '):<10} {value}")


def cancel(job: Annotated[str, typer.Argument(help="Slurm job id, job folder, or job name")]) -> None:
    """Cancel a pending or running Slurm job."""
    from gputrain.backends.slurm import SlurmBackend
    from gputrain.registry.store import JobRegistry

    registry = JobRegistry()
    record = registry.find(job)
    if record is not None and record.backend != "slurm":
        raise ClusterError(f"job {record.job_id} runs on {record.backend}, not Slurm; use its own commands")
    job_id = record.job_id if record else job
    SlurmBackend(registry).cancel(job_id)
    print(f"cancelled job {job_id}")


def clusters(json_: JsonOpt = False) -> None:
    """Cluster profiles: built-ins and ~/.config/gputrain/clusters.yaml ($GPUTRAIN_CONFIG)."""
    from gputrain.hardware.clusters import config_path, list_clusters

    profiles = list_clusters()
    if json_:
        print(json.dumps([p.model_dump(mode="json") for p in profiles], indent=2))
        return
    for p in profiles:
        gres = p.gres_option(p.gpus_per_node) or "no GPUs"
        where = f"partition {p.partition}" if p.partition else "default partition"
        print(f"{p.name:<12} {p.gpu or '-'} x{p.gpus_per_node}  {gres}  {where}  max {p.max_time}  "
              f"{p.description}")
    print(f"(user profiles: {config_path()})")
