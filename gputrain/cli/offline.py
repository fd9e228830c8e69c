"""Clusters without internet: ``prepare`` (on the login node, before submitting) and ``sync`` (after the job).

    gputrain prepare recipes/grpo_code_mbpp.yaml --cluster supercloud
    gputrain submit recipes/grpo_code_mbpp.yaml --cluster supercloud
    gputrain sync 12345

The hub and W&B libraries are imported inside the bodies (``gputrain --help`` stays cheap).
"""

from __future__ import annotations

import json
import os
import shlex
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON (errors too, as {\"error\": ...})")]


def prepare(
    recipe: Annotated[str, typer.Argument(help="recipe file, or the name of a bundled recipe")],
    cluster: Annotated[str | None, typer.Option("--cluster", help="cluster profile ($GPUTRAIN_CLUSTER)")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU type; default: the cluster's")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a field: a.b=value")] = None,
    preset: Annotated[str | None, typer.Option("--preset", help="named preset of the GPU profile")] = None,
    cache_dir: Annotated[str | None, typer.Option(
        "--cache-dir", help="cache to fill (default: the profile's cache_dir, $HF_HOME, ~/.cache/huggingface)")] = None,
    verify: Annotated[bool, typer.Option("--verify", help="re-hash every file, not only the new ones")] = False,
    json_: JsonOpt = False,
) -> None:
    """Download what a job will load (model, datasets) into the cluster's cache, pinned and verified.

    Run it where the internet is (a login node); jobs on nodes without internet then read only that
    cache, and `gputrain submit` checks it is complete. A second run downloads nothing.

    \b
    Examples:
      gputrain prepare recipes/grpo_code_mbpp.yaml --cluster supercloud
      gputrain prepare grpo_code_mbpp --cluster supercloud --set model.name=Qwen/Qwen2.5-Coder-3B-Instruct
    """
    from gputrain.cli.output import progress
    from gputrain.cli.progress import activity
    from gputrain.offline.needs import hub_items
    from gputrain.offline.prepare import human, prepare_item

    plan, cluster = _plan(recipe, cluster, gpu, set_ or [], preset)
    home = cache_dir_for(plan, cache_dir)
    items = hub_items(plan)
    if items:
        from gputrain.cli.extras import require_modules

        require_modules("gputrain prepare", ("huggingface_hub", *(("datasets",) if any(
            i.kind == "dataset" for i in items) else ())))
    rows = []
    total = 0
    for item in items:
        with activity() as say:  # on a terminal, a spinner with the file being fetched and the time it takes
            say(f"{item.label} ({item.revision}) -> {home}")
            result = prepare_item(item, home, verify_all=verify, progress=say)
        pinned = result.pinned
        total += pinned.size
        rows.append({"kind": item.kind, "repo": item.repo, "config": item.config, "commit": pinned.commit,
                     "files": [f.path for f in pinned.files], "bytes": pinned.size,
                     "downloaded": result.downloaded, "downloaded_bytes": result.downloaded_bytes,
                     "verified": result.verified, "cache_files": list(pinned.cache_files)})
        if not json_:
            got = (f"fetched {len(result.downloaded)} file(s), {human(result.downloaded_bytes)}"
                   if result.downloaded else "already in the cache, nothing fetched")
            print(f"{item.label} @ {pinned.commit[:12]}: {len(pinned.files)} file(s), {human(pinned.size)}; {got}")
    if json_:
        print(json.dumps({"cache_dir": home, "repos": rows, "bytes": total}))
        return
    if not items:
        print(f"{plan.recipe.name}: loads nothing from the hub (built-in model, local or generated data)")
        return
    print(f"cache {home}: {len(items)} repositories, {human(total)} for this job")
    if cluster:
        progress(f"next: gputrain submit {shlex.quote(recipe)} --cluster {shlex.quote(cluster)}")


def cache_dir_for(plan: JobPlan, given: str | None) -> str:
    """The cache ``prepare`` fills and ``submit`` checks: ``--cache-dir``, else the profile's default."""
    from gputrain.render.sbatch import default_hf_home

    if given:
        return os.path.abspath(os.path.expanduser(given))
    return default_hf_home(plan.cluster, os.environ)


def _plan(recipe: str, cluster: str | None, gpu: str | None, sets: list[str],
          preset: str | None) -> tuple[JobPlan, str | None]:
    from gputrain.cli.core import resolve_recipe_path
    from gputrain.planner import make_plan

    cluster = cluster or os.environ.get("GPUTRAIN_CLUSTER")
    plan = make_plan(resolve_recipe_path(recipe), gpu=gpu, cluster=cluster, overrides=sets, preset=preset,
                     target="slurm" if cluster else None, check_memory=False)
    return plan, cluster


def prepare_command(recipe: str, cluster: str, gpu: str | None, sets: list[str], preset: str | None) -> str:
    """The ``gputrain prepare`` line that fetches what a ``submit`` with these options needs."""
    words = ["gputrain", "prepare", recipe, "--cluster", cluster]
    if gpu:
        words += ["--gpu", gpu]
    for value in sets:
        words += ["--set", value]
    if preset:
        words += ["--preset", preset]
    return shlex.join(words)


def check_before_submit(plan: JobPlan, command: str, *, check_python: bool = True,
                        missing_out: list[str] | None = None) -> JobPlan:
    """What ``submit`` asks before sbatch: can the job's interpreter import the training, and, on a cluster
    without internet, is everything the job loads in the cache? Returns the plan with the pinned commits
    (``plan.offline``); refuses in one line naming what is missing and ``command`` (the prepare line).

    A dry run passes ``missing_out``: what the cache lacks is appended there instead of refused, so the job
    folder is still written and the dry run can list what ``prepare`` must fetch (#31)."""
    import sys

    from gputrain.cli.output import warn
    from gputrain.errors import UserError
    from gputrain.offline.interpreter import require_interpreter
    from gputrain.offline.manifest import check_cache
    from gputrain.offline.needs import hub_items, node_packages
    from gputrain.render.sbatch import default_python

    profile = plan.cluster
    if check_python and (profile is None or not profile.container):
        tracking = tuple(name for name, on in (("wandb", plan.recipe.tracking.wandb),
                                               ("tensorboard", plan.recipe.tracking.tensorboard)) if on)
        result = require_interpreter(default_python(profile, sys.executable), plan.recipe.entrypoint,
                                     tracking=tracking, packages=node_packages(plan))
        if not result.checked:
            warn(f"{result.note} (the cluster profile's python)")
    if profile is None or not profile.offline:
        return plan
    home = cache_dir_for(plan, None)
    assets, missing = check_cache(home, hub_items(plan))
    if missing and missing_out is not None:
        missing_out.extend(missing)
        return plan.model_copy(update={"offline": assets}) if assets.repos else plan
    if missing:
        raise UserError(f"cluster {profile.name!r} has no internet on its nodes and {home} lacks "
                        f"{'; '.join(missing)}: run `{command}` first (where the internet is)")
    return plan.model_copy(update={"offline": assets})


def sync(
    job: Annotated[str, typer.Argument(help="job id, name or job folder")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list what would upload; no server needed")] = False,
    project: Annotated[str | None, typer.Option("--project", help="W&B project to upload to")] = None,
    tensorboard_to: Annotated[str | None, typer.Option(
        "--tensorboard-to", help="copy the TensorBoard event files under this folder")] = None,
    json_: JsonOpt = False,
) -> None:
    """Upload a finished job's offline W&B runs and list its TensorBoard files.

    Run it where the internet is (the login node), after a job on nodes without internet. W&B marks what
    it uploaded, so a second sync uploads nothing new.

    \b
    Examples:
      gputrain sync 12345 --dry-run
      gputrain sync 12345
      gputrain sync logs/grpo_code_mbpp_job_12345_20260101_120000 --tensorboard-to ~/tb
    """
    from pathlib import Path

    from gputrain.cli.logs import resolve_target
    from gputrain.errors import UserError
    from gputrain.offline.sync import copy_tensorboard, sync_wandb, tensorboard_files, wandb_runs

    job_dir, _ = resolve_target(job)
    if not job_dir.is_dir():
        raise UserError(f"{job}: not a job folder")
    runs = wandb_runs(job_dir)
    pending = [r for r in runs if not r.synced]
    events = tensorboard_files(job_dir)
    output = sync_wandb(pending, dry_run=dry_run, project=project)
    copied = copy_tensorboard(job_dir, events, Path(tensorboard_to).expanduser()) if tensorboard_to else []
    if json_:
        print(json.dumps({"job_dir": str(job_dir), "dry_run": dry_run,
                          "wandb_runs": [{"folder": str(r.folder), "synced_before": r.synced} for r in runs],
                          "uploaded": [] if dry_run else [str(r.folder) for r in pending],
                          "would_upload": [str(r.folder) for r in pending] if dry_run else [],
                          "tensorboard_files": [str(p) for p in events], "tensorboard_copied": [str(p) for p in copied],
                          "wandb_output": output}))
        return
    verb = "would upload" if dry_run else "uploaded"
    print(f"W&B: {len(runs)} offline run(s) in {job_dir / 'wandb'}; {verb} {len(pending)}"
          + (f" ({len(runs) - len(pending)} already synced)" if len(runs) > len(pending) else ""))
    for run in pending:
        print(f"  {run.folder.name} ({run.log.stat().st_size} bytes)")
    print(f"TensorBoard: {len(events)} event file(s) in {job_dir / 'tensorboard'}"
          + (f"; copied {len(copied)} under {tensorboard_to}" if tensorboard_to else
             (f"; view with: tensorboard --logdir {job_dir / 'tensorboard'}" if events else "")))
