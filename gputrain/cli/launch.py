"""The one place where the CLI submits a job, to whichever backend: ``run``, ``submit`` and ``runpod up``.

    gputrain run gnn_coloring --gpu cpu --gpus 2                  # local, attached: follow to the end
    gputrain submit selftest --cluster testbed --sweep train.seed=0,1   # slurm, one array
    gputrain submit selftest --backend local --gpu cpu --gpus 2 --follow
    gputrain runpod up gnn_coloring --gpu B200 --image me/gnn:latest     # runpod: submit + follow

:func:`plan_requests` plans every point of the command (a ``--sweep`` grid) for the backend's target before
anything is written; :func:`launch` hands the requests to :meth:`Backend.submit_all` and, when the user waits,
to :meth:`Backend.follow`. Commands differ only in their options and in what they print.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from gputrain.backends.base import Backend, JobRequest, Submission


@dataclass
class Planned:
    """What a command planned: the requests, and each point's warnings (said once each by the command)."""

    requests: list[JobRequest]
    warnings: list[str] = field(default_factory=list)
    to_fetch: list[str] = field(default_factory=list)  # dry run on an offline cluster: what `prepare` must fetch
    prepare: str | None = None  # the prepare command that fetches it


def plan_requests(
    recipe: str, backend: Backend, *, logs_dir: Path, gpu: str | None = None, gpus: int | None = None,
    nodes: int | None = None, cluster: str | None = None, overrides: list[str] | None = None,
    sweep: list[str] | None = None, preset: str | None = None, dry_run: bool = False,
    resume_from: str | None = None,
) -> Planned:
    """One request per point of ``sweep`` (one when there is none), each planned for ``backend``'s target."""
    from gputrain.backends.base import JobRequest
    from gputrain.cli.core import resolve_recipe_path, resume_source
    from gputrain.planner import make_plan
    from gputrain.recipe.loader import expand_sweeps
    from gputrain.recipe.plan_only import refuse_plan_only

    path = resolve_recipe_path(recipe)
    source = resume_source(resume_from) if resume_from else None
    requests: list[JobRequest] = []
    warnings: list[str] = []
    to_fetch: list[str] = []
    prepare: str | None = None
    for n, point in enumerate(expand_sweeps(sweep or [])):
        sets = [*(overrides or []), *point]
        plan = make_plan(path, gpu=gpu, gpus_per_node=gpus, nodes=nodes, cluster=cluster, overrides=sets,
                         preset=preset, target=backend.plan_target)
        refuse_plan_only(plan.recipe)  # a field the trainers do not implement yet: plan accepts it, no launch
        if backend.needs_cluster and cluster:
            from gputrain.cli.offline import check_before_submit, prepare_command

            command = prepare_command(recipe, cluster, gpu, sets, preset)
            missing: list[str] = []  # a dry run lists what the offline cache lacks instead of refusing (#31)
            plan = check_before_submit(plan, command, check_python=n == 0,  # interpreter, offline cache (#20)
                                       missing_out=missing if dry_run else None)
            if missing:
                to_fetch.extend(m for m in missing if m not in to_fetch)
                prepare = prepare or command
        warnings.extend(plan.warnings)
        requests.append(JobRequest(plan=plan, logs_dir=logs_dir, dry_run=dry_run, sweep=tuple(point),
                                   resume_from=source))
    return Planned(requests, list(dict.fromkeys(warnings)), to_fetch, prepare)


@dataclass
class Launched:
    """The submissions, and the exit code of the job followed (None when nobody waited)."""

    submissions: list[Submission]
    exit_code: int | None = None


def launch(
    backend: Backend, requests: list[JobRequest], *, follow: bool = False, echo: IO[str] | None = None,
    announce: Callable[[list[Submission]], None] | None = None,
) -> Launched:
    """Submit every request through ``backend``; ``announce`` sees the submissions before anything is
    followed; with ``follow`` (one job, not a dry run) wait for its end, its log copied to ``echo``."""
    from gputrain.errors import UserError

    if follow and len(requests) != 1:
        raise UserError("--follow waits for one job; a --sweep submits several (follow them with `gputrain "
                        "logs JOB -f`)")
    submissions = backend.submit_all(requests)
    for request, sub in zip(requests, submissions, strict=True):
        sub.extra.setdefault("sweep", list(request.sweep))
    if announce is not None:
        announce(submissions)
    if not follow or submissions[0].dry_run:
        return Launched(submissions)
    return Launched(submissions, backend.follow(submissions[0], echo=echo))
