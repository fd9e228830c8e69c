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
from typing import TYPE_CHECKING, Annotated

import typer

from gputrain.cli import complete
from gputrain.cli.core import GpuOpt, GpusOpt, PresetOpt, SetOpt

if TYPE_CHECKING:
    from gputrain.backends.base import Submission


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
    from gputrain.backends.table import load_backend
    from gputrain.cli.launch import launch, plan_requests
    from gputrain.cli.output import warn
    from gputrain.errors import JobFailedError

    backend = load_backend("local", attached=not detach)
    planned = plan_requests(recipe, backend, logs_dir=logs_dir, gpu=gpu, gpus=gpus, nodes=1,
                            overrides=list(set_ or []), preset=preset, resume_from=resume_from)
    for warning in planned.warnings:
        warn(warning)

    def announce(subs: list[Submission]) -> None:
        sub = subs[0]
        print(f"job {sub.job_id}: {sub.job_dir}", flush=True)
        if "resumed_from" in sub.extra:
            print(f"resuming from {sub.extra['resumed_from']}", flush=True)
        if "supervisor_pid" in sub.extra:
            print(f"started in the background (supervisor pid {sub.extra['supervisor_pid']}); follow with: "
                  f"gputrain logs {sub.job_id} -f")

    launched = launch(backend, planned.requests, follow=not detach, echo=sys.stdout, announce=announce)
    if detach:
        return
    sub, rc = launched.submissions[0], launched.exit_code
    summary = sub.job_dir / "job_summary.txt"
    if summary.is_file():
        print(summary.read_text(encoding="utf-8"), end="")
    rec = backend.registry.get(sub.job_id)
    if getattr(backend, "interrupted_by", None) == "SIGINT":  # Ctrl-C: the job is cancelled, exit 130
        print(f"job {sub.job_id} {rec.state} (Ctrl-C); folder {sub.job_dir}", file=sys.stderr)
        raise typer.Exit(130)
    if rc != 0:
        raise JobFailedError(f"job {sub.job_id} {rec.state} (exit code {rc}); folder {sub.job_dir}")
    print(f"job {sub.job_id} {rec.state} (exit code {rc}); folder {sub.job_dir}")
