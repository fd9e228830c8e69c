"""``gputrain run``: a recipe on this machine with torchrun, recorded in the job registry.

    gputrain run recipes/gnn_coloring.yaml --gpu cpu --gpus 2
    gputrain run gnn_coloring --gpu cpu --gpus 2 --set train.epochs=2 --logs-dir /tmp/logs --detach

Prints the job id and folder first, then the training output (also in ``training_output.log``), then
the job summary; a job that does not complete exits 1 with its own exit code in the error line.
``--detach`` returns at once; follow the job with ``gputrain logs <job id> -f``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from gputrain.cli import complete
from gputrain.cli.core import GpuOpt, GpusOpt, PresetOpt, SetOpt, resolve_recipe_path, resume_source


def register(app: typer.Typer) -> None:
    """Add ``run`` to ``app`` (for embedding; ``gputrain`` itself uses :data:`gputrain.cli.app.COMMANDS`)."""
    app.command("run")(run)


def run(
    recipe: Annotated[str, typer.Argument(help="recipe file, or the name of a bundled recipe",
                                              autocompletion=complete.recipes)],
    gpu: GpuOpt = None,
    gpus: GpusOpt = None,
    set_: SetOpt = None,
    preset: PresetOpt = None,
    logs_dir: Annotated[Path, typer.Option("--logs-dir", help="where job folders go")] = Path("logs"),
    detach: Annotated[bool, typer.Option("--detach", help="start in the background and return")] = False,
    resume_from: Annotated[
        str | None, typer.Option("--resume-from", help="start from this job's newest checkpoint (job id or folder)")
    ] = None,
) -> None:
    """Run a recipe here with torchrun (one node): job folder, registry record, log, summary.

    A job that does not complete exits 1 (its own exit code is in the error line).

    \b
    Examples:
      gputrain run recipes/gnn_coloring.yaml --gpu cpu --gpus 2
      gputrain run gnn_coloring --gpu cpu --gpus 2 --set train.epochs=2 --detach
      gputrain run gnn_coloring --gpu cpu --gpus 2 --set train.batch_size=8 --resume-from local-3
    """
    from gputrain.backends.local import LocalBackend
    from gputrain.backends.resume import seed_checkpoint
    from gputrain.cli.output import warn
    from gputrain.errors import JobFailedError
    from gputrain.planner import make_plan

    path = resolve_recipe_path(recipe)
    source = resume_source(resume_from) if resume_from else None
    plan = make_plan(
        path, gpu=gpu, gpus_per_node=gpus, nodes=1, overrides=list(set_ or []), preset=preset, target="local"
    )
    from gputrain.recipe.plan_only import refuse_plan_only

    refuse_plan_only(plan.recipe)
    for warning in plan.warnings:
        warn(warning)
    backend = LocalBackend()
    sub = backend.prepare(plan, logs_dir=logs_dir)
    print(f"job {sub.job_id}: {sub.job_dir}", flush=True)
    if source is not None:
        seeded = seed_checkpoint(source, sub.job_dir)
        print(f"resuming from {seeded.name} of {source}", flush=True)
    if detach:
        pid = backend.detach(sub)
        print(f"started in the background (supervisor pid {pid}); follow with: gputrain logs {sub.job_id} -f")
        return
    rc = backend.run(sub, echo=sys.stdout)
    summary = sub.job_dir / "job_summary.txt"
    if summary.is_file():
        print(summary.read_text(encoding="utf-8"), end="")
    rec = backend.registry.get(sub.job_id)
    if rc != 0:
        raise JobFailedError(f"job {sub.job_id} {rec.state} (exit code {rc}); folder {sub.job_dir}")
    print(f"job {sub.job_id} {rec.state} (exit code {rc}); folder {sub.job_dir}")
