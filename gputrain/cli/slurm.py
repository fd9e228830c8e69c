"""Slurm commands: ``submit``, ``clusters`` (``jobs``, ``status`` and ``cancel`` serve every backend:
:mod:`gputrain.cli.jobs`).

    gputrain submit recipes/selftest.yaml --cluster testbed --nodes 2 --gpus 1
    gputrain clusters

Bodies import what they need (planner, backend, registry), so ``gputrain --help`` stays cheap.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gputrain.cli import complete
from gputrain.errors import ClusterError, ClusterProfileError

if TYPE_CHECKING:
    from gputrain.backends.slurm import PreparedJob

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON (errors too, as {\"error\": ...})")]


def register(app: typer.Typer) -> None:
    """Add these commands to ``app`` (for embedding; ``gputrain`` itself uses :data:`gputrain.cli.app.COMMANDS`)."""
    for command in (submit, clusters):
        app.command(command.__name__)(command)


def submit(
    recipe: Annotated[str, typer.Argument(help="recipe file, or the name of a bundled recipe",
                                          autocompletion=complete.recipes)],
    cluster: Annotated[str | None, typer.Option("--cluster", help="cluster profile ($GPUTRAIN_CLUSTER)",
                                                autocompletion=complete.clusters)] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU type; default: the cluster's",
                                            autocompletion=complete.gpus)] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", help="GPUs per node", min=1)] = None,
    nodes: Annotated[int | None, typer.Option("--nodes", help="number of nodes", min=1)] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a field: a.b=value")] = None,
    sweep: Annotated[list[str] | None, typer.Option(
        "--sweep", help="one job per value: a.b=v1,v2,... (repeat the option for a grid)")] = None,
    max_parallel: Annotated[int | None, typer.Option(
        "--max-parallel", help="a --sweep runs at most this many points at once (--array=0-N%P)", min=1)] = None,
    array: Annotated[bool, typer.Option(
        "--array/--no-array", help="a --sweep as one job array (default) or one job per point")] = True,
    preset: Annotated[str | None, typer.Option("--preset", help="named preset of the GPU profile",
                                               autocompletion=complete.presets)] = None,
    logs_dir: Annotated[Path, typer.Option("--logs-dir", help="where job folders go")] = Path("logs"),
    dry_run: Annotated[bool, typer.Option("--dry-run", help="write the job folder, do not submit")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="NCCL_DEBUG=INFO, TORCH_DISTRIBUTED_DEBUG")] = False,
    resume_from: Annotated[
        str | None, typer.Option("--resume-from", help="start from this job's newest checkpoint (job id or folder)")
    ] = None,
    account: Annotated[str | None, typer.Option("--account", help="sbatch --account (over the profile's)")] = None,
    qos: Annotated[str | None, typer.Option("--qos", help="sbatch --qos (over the profile's)")] = None,
    partition: Annotated[str | None, typer.Option(
        "--partition", help="sbatch --partition (over the profile's)")] = None,
    reservation: Annotated[str | None, typer.Option("--reservation", help="sbatch --reservation")] = None,
    exclusive: Annotated[bool, typer.Option("--exclusive", help="whole nodes (sbatch --exclusive)")] = False,
    mail_type: Annotated[list[str] | None, typer.Option(
        "--mail-type", help="BEGIN, END, FAIL, REQUEUE, ALL, TIME_LIMIT_80... (repeatable)")] = None,
    mail_user: Annotated[str | None, typer.Option("--mail-user", help="where Slurm mails")] = None,
    begin: Annotated[str | None, typer.Option("--begin", help="start no earlier than: now+1hours, 16:00...")] = None,
    after: Annotated[list[str] | None, typer.Option("--after", help="start after job ID ends (any state)")] = None,
    after_ok: Annotated[list[str] | None, typer.Option(
        "--after-ok", help="start after job ID completed successfully")] = None,
    signal: Annotated[str | None, typer.Option(
        "--signal", help="USR1 or USR2: what Slurm sends before the time limit (over the profile's)")] = None,
    json_: JsonOpt = False,
) -> None:
    """Plan a recipe for a Slurm cluster, write its job folder and sbatch it.

    The job is recorded in `gputrain jobs`. --sweep runs one point per value (a grid when repeated) as one
    job array: one id for the sweep that `status`, `jobs --sweep` and `cancel` accept, a folder per point;
    every point is planned before any is submitted.

    \b
    Examples:
      gputrain submit recipes/grpo_code_mbpp.yaml --cluster supercloud --set train.max_steps=100
      gputrain submit gnn_coloring --cluster mylab --nodes 2 --gpus 4 --dry-run
      gputrain submit selftest --cluster testbed --sweep train.seed=0,1,2
      gputrain submit selftest --cluster testbed --after-ok 4242 --qos high --mail-type END
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
    from gputrain.recipe.plan_only import refuse_plan_only
    from gputrain.render.sbatch import SubmitOptions, shape_warnings

    options = SubmitOptions(
        account=account, qos=qos, partition=partition, reservation=reservation, exclusive=exclusive,
        mail_type=tuple(k for m in mail_type or [] for k in m.split(",") if k), mail_user=mail_user, begin=begin,
        after=tuple(after or []), after_ok=tuple(after_ok or []), signal=signal.upper() if signal else None)
    recipe_path = resolve_recipe_path(recipe)
    source = str(resume_source(resume_from)) if resume_from else None
    jobs: list[tuple[PreparedJob, JobView]] = []
    points = expand_sweeps(sweep or [])
    as_array = (len(points), max_parallel) if array and len(points) > 1 else None
    for n, point in enumerate(points):
        plan = make_plan(recipe_path, gpu=gpu, gpus_per_node=gpus, nodes=nodes, cluster=cluster,
                         overrides=[*(set_ or []), *point], preset=preset, target="slurm")
        refuse_plan_only(plan.recipe)
        command = prepare_command(recipe, cluster, gpu, [*(set_ or []), *point], preset)
        to_fetch: list[str] = []  # a dry run lists what the offline cache lacks instead of refusing (#31)
        plan = check_before_submit(plan, command, check_python=n == 0,  # interpreter, offline cache (#20)
                                   missing_out=to_fetch if dry_run else None)
        view = JobView(recipe=plan.recipe.name, cluster=cluster, point=point,
                       warnings=[*plan.warnings, *shape_warnings(plan)],
                       shape=f"{plan.nodes} node(s) x {plan.gpus_per_node} {plan.gpu.name}",
                       to_fetch=to_fetch, prepare=command if to_fetch else None)
        prepared = prepare_job(plan, logs_dir=logs_dir, debug=debug, sweep=point, options=options, array=as_array)
        jobs.append((replace(prepared, resume_from=source) if source else prepared, view))
    if as_array is not None:
        from gputrain.backends.slurm_array import same_script

        if not same_script([job for job, _ in jobs]) or source:
            raise ClusterProfileError("--sweep: the points need different job scripts (a resource or the "
                                      "environment differs) or --resume-from was given; pass --no-array")
        submit_sweep(jobs, dry_run=dry_run, debug=debug, as_json=json_)
        return
    submit_all(jobs, dry_run=dry_run, debug=debug, as_json=json_, sweep=bool(sweep))


def submit_sweep(jobs: list[tuple[PreparedJob, JobView]], *, dry_run: bool, debug: bool, as_json: bool) -> None:
    """One array for every point of a --sweep; each distinct warning once on stderr."""
    from gputrain.backends.slurm import SlurmBackend
    from gputrain.backends.slurm_array import submit_array
    from gputrain.cli.output import warn

    results = submit_array(SlurmBackend(debug=debug), [job for job, _ in jobs], dry_run=dry_run)
    for warning in dict.fromkeys(w for _, view in jobs for w in view.warnings):
        warn(warning)
    sweep_id = results[0].job_id.split("_")[0]
    rows: list[dict[str, Any]] = [
        {"job_id": r.job_id, "job_dir": str(r.job_dir), "dry_run": dry_run, "sweep": job.sweep,
         "sweep_id": None if dry_run else sweep_id} for r, (job, _) in zip(results, jobs, strict=True)]
    if as_json:
        print(json.dumps(rows))
        return
    view = jobs[0][1]
    if dry_run:
        print(f"dry run: wrote {len(rows)} job folders for one array ({view.shape} on {view.cluster})")
    else:
        print(f"submitted sweep {sweep_id}: {len(rows)} points as one array ({view.recipe}, {view.shape} on "
              f"{view.cluster}); `gputrain status {sweep_id}`, `gputrain cancel {sweep_id}`")
    for (job, _), row in zip(jobs, rows, strict=True):
        print(f"  {row['job_id']}  {' '.join(job.sweep)}  {row['job_dir']}")


@dataclass
class JobView:
    """What ``submit`` says about one prepared job besides what sbatch answers."""

    recipe: str
    cluster: str
    point: list[str]
    warnings: list[str]
    shape: str
    to_fetch: list[str] = field(default_factory=list)  # dry run: what `prepare` must fetch first
    prepare: str | None = None  # the prepare command that fetches it


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
                     **({"sweep": job.sweep} if job.sweep else {}),
                     **({"prepare": {"command": view.prepare, "missing": view.to_fetch}} if view.to_fetch else {})})
        for warning in view.warnings:
            if warning not in warned:
                warn(warning)
                warned.add(warning)
        if as_json:
            continue
        where = f"{view.shape} on {view.cluster}" + (f", {' '.join(view.point)}" if view.point else "")
        if dry_run:
            print(f"dry run: wrote {result.job_dir}/job.sbatch ({where}); submit it with sbatch")
            if view.to_fetch:
                print(f"  the nodes have no internet and the cache lacks what the job loads; `{view.prepare}` "
                      "must fetch (where the internet is) before a real submit:")
                for label in view.to_fetch:
                    print(f"    {label}")
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
