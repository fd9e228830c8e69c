"""``gputrain run``: a recipe on this machine with torchrun, recorded in the job registry.

    gputrain run recipes/gnn_coloring.yaml --gpu cpu --gpus 2
    gputrain run gnn_coloring --gpu cpu --gpus 2 --set train.epochs=2 --logs-dir /tmp/logs --detach

Prints the job id and folder first, then the training output (also in ``training_output.log``), then
the job summary; a job that does not complete exits 1 with its own exit code in the error line.
``--detach`` returns at once; follow the job with ``gputrain logs <job id> -f``. ``--json``: all of that on
stderr, and one object on stdout (job id, folder, state, exit code).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gputrain.cli import complete
from gputrain.cli.core import GpuOpt, GpusOpt, JsonOpt, PresetOpt, SetOpt

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
    json_: JsonOpt = False,
) -> None:
    """Run a recipe here with torchrun (one node): job folder, registry record, log, summary.

    A job that does not complete exits 1 (its own exit code is in the error line). With --json the training's
    output goes to stderr and stdout gets one object: job_id, job_dir, state, exit_code.

    \b
    Examples:
      gputrain run recipes/gnn_coloring.yaml --gpu cpu --gpus 2
      gputrain run gnn_coloring --gpu cpu --gpus 2 --set train.epochs=2 --detach
      gputrain run gnn_coloring --gpu cpu --gpus 2 --set train.batch_size=8 --resume-from local-3
      gputrain run selftest --gpu cpu --gpus 2 --json
    """
    from gputrain.cli.job_json import emit, job_object, stdout_to_stderr

    with stdout_to_stderr(json_):
        outcome = _run(recipe, gpu, gpus, set_, preset, logs_dir, detach, resume_from)
    if not json_:
        if outcome.get("exit") == 130:  # Ctrl-C: the job is cancelled (said on stderr), exit 130
            raise typer.Exit(130)
        if outcome.get("error"):
            from gputrain.errors import JobFailedError

            raise JobFailedError(outcome["error"])
        return
    error = outcome.pop("error", None)
    code = outcome.pop("exit", 0)
    emit(job_object(**outcome), error=error, kind="interrupted" if code == 130 else "job_failed", exit_code=code)


def _run(recipe: str, gpu: str | None, gpus: int | None, set_: list[str] | None, preset: str | None,
         logs_dir: Path, detach: bool, resume_from: str | None) -> dict[str, Any]:
    """The run itself; returns the job's fields (``error``/``exit`` when the command must fail)."""
    from gputrain.backends.table import load_backend
    from gputrain.cli.launch import launch, plan_requests
    from gputrain.cli.output import warn

    backend = load_backend("local", attached=not detach)
    planned = plan_requests(recipe, backend, logs_dir=logs_dir, gpu=gpu, gpus=gpus, nodes=1,
                            overrides=list(set_ or []), preset=preset, resume_from=resume_from)
    for warning in planned.warnings:
        warn(warning)
    from gputrain.cli.extras import require_train_extra

    require_train_extra("gputrain run", planned.requests[0].plan)

    def announce(subs: list[Submission]) -> None:
        sub = subs[0]
        print(f"job {sub.job_id}: {sub.job_dir}", flush=True)
        if "resumed_from" in sub.extra:
            print(f"resuming from {sub.extra['resumed_from']}", flush=True)
        if "supervisor_pid" in sub.extra:
            print(f"started in the background (supervisor pid {sub.extra['supervisor_pid']}); follow with: "
                  f"gputrain logs {sub.job_id} -f")

    from gputrain.cli.progress import job_echo

    with job_echo(sys.stdout) as echo:  # on a terminal, the phase the training is in (ONNX export, evaluation)
        launched = launch(backend, planned.requests, follow=not detach, echo=echo, announce=announce)
    sub = launched.submissions[0]
    rec = backend.registry.get(sub.job_id)
    job = {"job_id": sub.job_id, "job_dir": sub.job_dir, "state": rec.state}
    if detach:
        return {**job, "exit_code": None}
    rc = launched.exit_code
    job = {**job, "exit_code": rc}
    summary = sub.job_dir / "job_summary.txt"
    if summary.is_file():
        print(summary.read_text(encoding="utf-8"), end="")
    if getattr(backend, "interrupted_by", None) == "SIGINT":  # Ctrl-C: the job is cancelled, exit 130
        print(f"job {sub.job_id} {rec.state} (Ctrl-C); folder {sub.job_dir}", file=sys.stderr)
        return {**job, "exit": 130, "error": f"job {sub.job_id} {rec.state} (Ctrl-C)"}
    if rc != 0:
        return {**job, "exit": 1, "error": f"job {sub.job_id} {rec.state} (exit code {rc}); folder {sub.job_dir}"}
    print(f"job {sub.job_id} {rec.state} (exit code {rc}); folder {sub.job_dir}")
    return job

