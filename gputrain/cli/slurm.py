"""Slurm commands: ``submit``, ``clusters`` (``jobs``, ``status`` and ``cancel`` serve every backend:
:mod:`gputrain.cli.jobs`).

    gputrain submit recipes/selftest.yaml --cluster testbed --nodes 2 --gpus 1
    gputrain clusters

Bodies import what they need (planner, backend, registry), so ``gputrain --help`` stays cheap.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gputrain.cli import complete
from gputrain.errors import ClusterProfileError

if TYPE_CHECKING:
    from gputrain.backends.base import Backend, Submission

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON (errors too, as {\"error\": ...})")]


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
    backend: Annotated[str, typer.Option("--backend", help="where the job runs: slurm, local (see `gputrain "
                                         "jobs --backend`)")] = "slurm",
    follow: Annotated[bool, typer.Option("--follow", help="wait for the job's end, printing its log")] = False,
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
    from gputrain.backends.table import load_backend

    settings: dict[str, Any] = {}
    if backend == "slurm":
        cluster = cluster or os.environ.get("GPUTRAIN_CLUSTER")
        if not cluster:
            from gputrain.hardware.clusters import list_clusters

            names = ", ".join(c.name for c in list_clusters())
            raise ClusterProfileError(f"--cluster is required (or set GPUTRAIN_CLUSTER); known clusters: {names}")
        from gputrain.render.sbatch import SubmitOptions

        settings = dict(debug=debug, array=array, max_parallel=max_parallel, options=SubmitOptions(
            account=account, qos=qos, partition=partition, reservation=reservation, exclusive=exclusive,
            mail_type=tuple(k for m in mail_type or [] for k in m.split(",") if k), mail_user=mail_user,
            begin=begin, after=tuple(after or []), after_ok=tuple(after_ok or []),
            signal=signal.upper() if signal else None))
    target = load_backend(backend, **settings)
    submit_with(target, recipe, cluster=cluster, gpu=gpu, gpus=gpus, nodes=nodes, overrides=list(set_ or []),
                sweep=list(sweep or []), preset=preset, logs_dir=logs_dir, dry_run=dry_run,
                resume_from=resume_from, follow=follow, as_json=json_)


def submit_with(target: Backend, recipe: str, *, cluster: str | None, gpu: str | None, gpus: int | None,
                nodes: int | None, overrides: list[str], sweep: list[str], preset: str | None, logs_dir: Path,
                dry_run: bool, resume_from: str | None, follow: bool, as_json: bool) -> None:
    """Plan every point, submit through ``target`` (:mod:`gputrain.cli.launch`), say what went in."""
    from gputrain.cli.launch import launch, plan_requests
    from gputrain.cli.output import warn
    from gputrain.errors import JobFailedError

    planned = plan_requests(recipe, target, logs_dir=logs_dir, gpu=gpu, gpus=gpus, nodes=nodes, cluster=cluster,
                            overrides=overrides, sweep=sweep, preset=preset, dry_run=dry_run,
                            resume_from=resume_from)
    first = planned.requests[0].plan
    warnings = list(planned.warnings)
    if target.plan_target == "slurm":
        from gputrain.render.sbatch import shape_warnings

        warnings += [w for r in planned.requests for w in shape_warnings(r.plan)]
    view = JobView(recipe=first.recipe.name, cluster=cluster or target.name,
                   shape=f"{first.nodes} node(s) x {first.gpus_per_node} {first.gpu.name}",
                   to_fetch=planned.to_fetch, prepare=planned.prepare)

    def announce(subs: list[Submission]) -> None:
        for warning in dict.fromkeys(warnings):
            warn(warning)
        _print_submissions(subs, view, dry_run=dry_run, as_json=as_json, sweep=bool(sweep))

    launched = launch(target, planned.requests, follow=follow, echo=sys.stderr if as_json else sys.stdout,
                      announce=announce)
    if launched.exit_code:
        sub = launched.submissions[0]
        raise JobFailedError(f"job {sub.job_id} ended with exit code {launched.exit_code}; folder {sub.job_dir}")


@dataclass
class JobView:
    """What ``submit`` says about the jobs besides what the backend answers."""

    recipe: str
    cluster: str
    shape: str
    to_fetch: list[str] = field(default_factory=list)  # dry run: what `prepare` must fetch first
    prepare: str | None = None  # the prepare command that fetches it


def _print_submissions(subs: list[Submission], view: JobView, *, dry_run: bool, as_json: bool,
                       sweep: bool) -> None:
    """One line per job (``--json``: one object, a list for a sweep); a sweep array's shared id."""
    array = "array_task" in subs[0].extra
    sweep_id = subs[0].extra.get("sweep_id")
    rows: list[dict[str, Any]] = [
        {"job_id": s.job_id, "job_dir": str(s.job_dir), "dry_run": dry_run,
         **({"sweep": list(s.extra.get("sweep") or [])} if sweep else {}),
         **({"sweep_id": sweep_id} if array else {}),
         **({"prepare": {"command": view.prepare, "missing": view.to_fetch}} if view.to_fetch else {})}
        for s in subs]
    if as_json:
        print(json.dumps(rows if sweep else rows[0]))
        return
    if array and dry_run:
        print(f"dry run: wrote {len(rows)} job folders for one array ({view.shape} on {view.cluster})")
    elif array:
        print(f"submitted sweep {sweep_id}: {len(rows)} points as one array ({view.recipe}, {view.shape} on "
              f"{view.cluster}); `gputrain status {sweep_id}`, `gputrain cancel {sweep_id}`")
    for sub in subs:
        point = " ".join(sub.extra.get("sweep") or [])
        where = f"{view.shape} on {view.cluster}" + (f", {point}" if point else "")
        if array:
            print(f"  {sub.job_id}  {point}  {sub.job_dir}")
        elif dry_run:
            script = sub.job_dir / "job.sbatch"
            after = f"; `sbatch {script}` runs it in that folder" if script.is_file() else ""
            print(f"dry run: wrote {sub.job_dir} ({where}){after}")
        else:
            print(f"submitted job {sub.job_id} ({view.recipe}, {where})")
            print(f"job folder: {sub.job_dir}")
    if dry_run and view.to_fetch:
        print(f"  the nodes have no internet and the cache lacks what the job loads; `{view.prepare}` must "
              "fetch (where the internet is) before a real submit:")
        for label in view.to_fetch:
            print(f"    {label}")


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
