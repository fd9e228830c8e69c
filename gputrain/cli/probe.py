"""``gputrain plan --probe``: run a few real steps of the recipe here, so the plan calibrates from them.

The probe is an ordinary local job (registry record, job folder, ``perf.json``) with ``train.max_steps``
set to ``--steps`` and evaluation and checkpoints pushed past the end; the plan that follows finds it as
its closest measured run. It runs on this machine only: to probe another GPU type, ``gputrain submit`` (or
``run``) a short job there and plan again once it has finished.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputrain.errors import JobFailedError, PlanError
from gputrain.planner import make_plan

if TYPE_CHECKING:
    from gputrain.backends.base import Submission

_PAST_THE_END = 10**9


def run_probe(path: Path, gpu: str | None, kwargs: dict[str, Any], steps: int) -> str:
    """Run ``steps`` steps here; returns the job id (its output goes to the job's log, not to stdout)."""
    from gputrain.backends.local import LocalBackend

    here = make_plan(path, gpu=None, check_memory=False, **{**kwargs, "cluster": None, "target": "local"})
    wanted = make_plan(path, gpu=gpu, check_memory=False, **kwargs) if gpu else here
    if wanted.gpu.name != here.gpu.name:
        raise PlanError(f"--probe runs here, on {here.gpu.name}; to measure {wanted.gpu.name}, run a short job "
                        f"there (gputrain submit ... --set train.max_steps={steps}) and plan again")
    overrides = [*kwargs.get("overrides", []), f"train.max_steps={steps}", f"train.eval_every={_PAST_THE_END}",
                 f"train.save_every={_PAST_THE_END}"]
    plan = make_plan(path, gpu=here.gpu.name, check_memory=False,
                     **{**kwargs, "overrides": overrides, "cluster": None, "target": "local", "nodes": 1})
    from gputrain.backends.base import JobRequest
    from gputrain.cli.extras import require_train_extra
    from gputrain.cli.launch import launch

    require_train_extra("plan --probe", plan)

    def announce(subs: list[Submission]) -> None:
        print(f"probe: job {subs[0].job_id}, {steps} steps on {here.gpu.name} ({subs[0].job_dir})", file=sys.stderr,
              flush=True)

    launched = launch(LocalBackend(attached=True), [JobRequest(plan, Path("logs"))], follow=True,
                      echo=io.StringIO(), announce=announce)
    sub, rc = launched.submissions[0], launched.exit_code
    if rc != 0:
        raise JobFailedError(f"probe job {sub.job_id} failed (exit code {rc}); see {sub.job_dir}")
    return sub.job_id
