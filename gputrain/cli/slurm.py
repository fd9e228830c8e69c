"""Slurm commands: ``submit``, ``clusters`` (``jobs``, ``status`` and ``cancel`` serve every backend:
:mod:`gputrain.cli.jobs`).

    gputrain submit recipes/selftest.yaml --cluster testbed --nodes 2 --gpus 1
    gputrain clusters

Bodies import what they need (planner, backend, registry), so ``gputrain --help`` stays cheap.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gputrain.errors import ClusterError, ClusterProfileError

if TYPE_CHECKING:
    from gputrain.backends.slurm import PreparedJob

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON (errors too, as {\"error\": ...})")]


def register(app: typer.Typer) -> None:
    """Add these commands to ``app`` (for embedding; ``gputrain`` itself uses :data:`gputrain.cli.app.COMMANDS`)."""
    for command in (submit, clusters):
        app.command(command.__name__)(command)


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
    resume_from: Annotated[
        str | None, typer.Option("--resume-from", help="start from this job's newest checkpoint (job id or folder)")
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Plan a recipe for a Slurm cluster, write its job folder and sbatch it.

    The job is recorded in `gputrain jobs`. --sweep submits one job per value (a grid when repeated);
    every job is planned before any is submitted.

    \b
    Examples:
      gputrain submit recipes/grpo_code_mbpp.yaml --cluster supercloud --set train.max_steps=100
      gputrain submit gnn_coloring --cluster mylab --nodes 2 --gpus 4 --dry-run
      gputrain submit selftest --cluster testbed --sweep train.seed=0,1,2
    """
    from gputrain.backends.slurm import prepare_job
    from gputrain.cli.core import resolve_recipe_path, resume_source
    from gputrain.cli.offline import check_before_submit, prepare_command
    from gputrain.planner import make_plan
    from gputrain.recipe.loader import expand_sweeps

    cluster = cluster or os.environ.get("GPUTRAIN_CLUSTER")
    if not cluster:
        from gputrain.hardware.clusters import list_clusters

        names = ", ".join(c.name for c in list_clusters())
        raise ClusterProfileError(f"--cluster is required (or set GPUTRAIN_CLUSTER); known clusters: {names}")
    recipe_path = resolve_recipe_path(recipe)
    source = str(resume_source(resume_from)) if resume_from else None
    jobs: list[tuple[PreparedJob, JobView]] = []
    for n, point in enumerate(expand_sweeps(sweep or [])):
        plan = make_plan(recipe_path, gpu=gpu, gpus_per_node=gpus, nodes=nodes, cluster=cluster,
                         overrides=[*(set_ or []), *point], preset=preset, target="slurm")
        command = prepare_command(recipe, cluster, gpu, [*(set_ or []), *point], preset)
        plan = check_before_submit(plan, command, check_python=n == 0)  # interpreter, offline cache (#20)
        view = JobView(recipe=plan.recipe.name, cluster=cluster, point=point, warnings=list(plan.warnings),
                       shape=f"{plan.nodes} node(s) x {plan.gpus_per_node} {plan.gpu.name}")
        prepared = prepare_job(plan, logs_dir=logs_dir, debug=debug, sweep=point)
        jobs.append((replace(prepared, resume_from=source) if source else prepared, view))
    submit_all(jobs, dry_run=dry_run, debug=debug, as_json=json_, sweep=bool(sweep))


@dataclass
class JobView:
    """What ``submit`` says about one prepared job besides what sbatch answers."""

    recipe: str
    cluster: str
    point: list[str]
    warnings: list[str]
    shape: str


def submit_all(jobs: list[tuple[PreparedJob, JobView]], *, dry_run: bool, debug: bool, as_json: bool,
               sweep: bool) -> None:
    """Submit prepared jobs in order; results on stdout, each distinct warning once on stderr.

    A failure after some jobs went in names the ones that did, so none is submitted twice by a retry.
    """
    from gputrain.backends.slurm import SlurmBackend
    from gputrain.cli.output import warn
    from gputrain.errors import GputrainError

    backend = SlurmBackend(debug=debug)
    done: list[str] = []
    rows: list[dict[str, Any]] = []
    warned: set[str] = set()  # a sweep's points mostly share their warnings: each is said once
    for job, view in jobs:
        try:
            result = backend.submit_prepared(job, dry_run=dry_run)
        except GputrainError as exc:
            if not done:
                raise
            raise ClusterError(f"{exc.message} (after {len(done)} of {len(jobs)} jobs were submitted: "
                               f"{', '.join(done)})", exit_code=exc.exit_code) from None
        done.append(result.job_id)
        rows.append({"job_id": result.job_id, "job_dir": str(result.job_dir), "dry_run": dry_run,
                     **({"sweep": job.sweep} if job.sweep else {})})
        for warning in view.warnings:
            if warning not in warned:
                warn(warning)
                warned.add(warning)
        if as_json:
            continue
        where = f"{view.shape} on {view.cluster}" + (f", {' '.join(view.point)}" if view.point else "")
        if dry_run:
            print(f"dry run: wrote {result.job_dir}/job.sbatch ({where}); submit it with sbatch")
        else:
            print(f"submitted job {result.job_id} ({view.recipe}, {where})")
            print(f"job folder: {result.job_dir}")
    if as_json:
        print(json.dumps(rows if sweep else rows[0]))


def clusters(json_: JsonOpt = False) -> None:
    """Cluster profiles: built-ins and your own.

    Your own live in ~/.config/gputrain/clusters.yaml (or the file $GPUTRAIN_CONFIG names); a profile
    with a built-in's name replaces it.

    \b
    Examples:
      gputrain clusters
      gputrain clusters --json
    """
    from gputrain.cli.output import print_table, progress
    from gputrain.hardware.clusters import config_path, list_clusters

    profiles = list_clusters()
    if json_:
        print(json.dumps([p.model_dump(mode="json") for p in profiles], indent=2))
        return
    rows = [(p.name, p.gpu, p.gpus_per_node, p.gres_option(p.gpus_per_node) or "no GPUs",
             p.partition or "(default)", p.max_time, p.description) for p in profiles]
    print_table(["name", "gpu", "gpus", "gres", "partition", "max time", "description"], rows)
    progress(f"(your own profiles: {config_path()})")
