"""``--json`` for the commands that run a job (``run``, ``runpod up``): one JSON object on stdout, nothing else.

While the job runs, everything those commands print (the training's log, the summary, progress) goes to
stderr instead, so ``gputrain run selftest --gpu cpu --gpus 2 --json | jq .state`` reads the result alone.
The object names the job (``job_id``, ``job_dir``, ``state``, ``exit_code``); a job that did not complete adds
``error`` (as every ``--json`` error has it) and the command still exits 1 (130 for Ctrl-C).

    gputrain run selftest --gpu cpu --gpus 2 --json
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer


@contextlib.contextmanager
def stdout_to_stderr(enabled: bool) -> Iterator[None]:
    """With ``--json``: whatever the command prints while the job runs goes to stderr."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    with contextlib.redirect_stdout(sys.stderr):
        yield


def job_object(job_id: str, job_dir: Path | str | None, state: str, exit_code: int | None,
               **extra: Any) -> dict[str, Any]:
    return {"job_id": job_id, "job_dir": str(job_dir) if job_dir is not None else None, "state": state,
            "exit_code": exit_code, **extra}


def emit(obj: dict[str, Any], *, error: str | None = None, kind: str = "job_failed", exit_code: int = 0) -> None:
    """Print the one object; a non-zero ``exit_code`` carries ``error`` and ends the command with it."""
    if exit_code:
        obj = {**obj, "error": {"message": error or obj["state"], "kind": kind, "exit_code": exit_code}}
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
    if exit_code:
        raise typer.Exit(exit_code)
