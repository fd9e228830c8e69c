"""``gputrain runpod up|status|list|down|logs`` and ``gputrain docker``.

    export RUNPOD_API_KEY=...      # only from the environment (or ~/.runpod/config.toml); never a flag
    gputrain docker recipes/gnn_coloring.yaml --gpu B200 --out build/
    gputrain runpod up recipes/gnn_coloring.yaml --gpu B200 --gpus 8 --image me/gnn:latest \\
        --data training_data/
    gputrain runpod list ; gputrain runpod status NAME ; gputrain runpod logs NAME -f
    gputrain runpod attach NAME    # follow a run again after the laptop that started it was closed
    gputrain runpod down NAME ; gputrain runpod down --all

Command bodies import httpx and the planner lazily so ``gputrain --help`` stays fast. A run whose
training fails exits 1 (the training's own exit code is in the error line).
"""

from __future__ import annotations

from pathlib import Path

import typer

from gputrain.cli.app import sub_app

app = sub_app(
    name="runpod",
    help="""Train on a RunPod pod: up (create, upload, train, download, terminate), attach, status, list, down,
    logs.

    The API key comes from RUNPOD_API_KEY (or ~/.runpod/config.toml), never from a flag.

    \b
    Example:
      gputrain runpod up gnn_coloring --gpu B200 --gpus 8 --image me/gnn:latest
    """,
    no_args_is_help=True,
)


@app.command()
def up(
    recipe: str = typer.Argument(..., help="recipe file, or the name of a bundled recipe"),
    gpu: str = typer.Option(..., "--gpu", help="catalog GPU name (B200, H100, ...) or cpu for a CPU pod"),
    gpus: int | None = typer.Option(None, "--gpus", help="GPUs on the pod (default: the recipe's)"),
    image: str = typer.Option(..., "--image", help="image built from `gputrain docker` output"),
    data: Path | None = typer.Option(None, "--data", help="local file or folder to upload"),
    disk: int = typer.Option(100, "--disk", help="container disk, GB"),
    volume: int | None = typer.Option(None, "--volume", help="persistent /workspace volume, GB"),
    cloud: str = typer.Option("SECURE", "--cloud", help="SECURE or COMMUNITY"),
    data_center: list[str] = typer.Option([], "--data-center", help="preferred data centre (repeatable)"),
    other_cloud: bool = typer.Option(False, "--other-cloud", help="on no capacity, try the other cloud"),
    cpu_flavor: str = typer.Option("cpu3c", "--cpu-flavor", help="RunPod CPU flavour for --gpu cpu"),
    keep: bool = typer.Option(False, "--keep", help="leave the pod running afterwards"),
    ready_timeout: float = typer.Option(900.0, "--ready-timeout", help="seconds to wait for SSH"),
    poll: float = typer.Option(5.0, "--poll", help="seconds between status polls"),
    set_: list[str] = typer.Option([], "--set", help="override a recipe value: a.b=v"),
    logs_dir: Path = typer.Option(Path("logs"), "--logs-dir", help="where job folders go"),
    remote_dir: str | None = typer.Option(None, "--remote-dir", help="folder on the pod"),
    bwlimit: int | None = typer.Option(None, "--bwlimit", help="upload limit, KiB/s"),
    name: str | None = typer.Option(None, "--name", help="pod name (default: a new one per run)"),
    attach_: bool = typer.Option(False, "--attach", help="follow the live run of this recipe (or --name) "
                                 "instead of starting another"),
    reconnect: float = typer.Option(600.0, "--reconnect-timeout", help="seconds to keep reconnecting after "
                                    "the connection drops, while the pod is RUNNING"),
    salvage: float = typer.Option(300.0, "--salvage-timeout", help="seconds for salvaging results before "
                                  "the pod is terminated"),
    keepalive: int = typer.Option(15, "--keepalive", help="seconds between ssh keep-alive probes", min=1),
    lost_create: float = typer.Option(120.0, "--lost-create-timeout", help="seconds to look for a pod whose "
                                      "create answer was lost before giving up on it", min=0),
    yes: bool = typer.Option(False, "--yes", "-y", help="create the pod without asking (required when stdin "
                             "is not a terminal)"),
    retry: int = typer.Option(0, "--retry", help="relaunch an evicted pod's run this many times, each on a new "
                              "pod from the newest salvaged checkpoint", min=0),
    json_: bool = typer.Option(False, "--json", help="the training's output on stderr; one object on stdout "
                               "(job_id, job_dir, state, exit_code, pod_id, salvaged)"),
) -> None:
    """Create a pod, train on it detached, download the results and terminate it.

    Each run gets its own pod, ssh key and folders; --name NAME reuses a kept pod, and is refused while
    another live run drives NAME. The training runs detached on the pod: a dropped connection is retried
    while the pod is RUNNING, and `gputrain runpod attach NAME` follows it again from another shell.
    Ctrl-C (or SIGTERM) salvages the newest checkpoint, metrics, logs and summary, then terminates the pod;
    a second Ctrl-C skips the salvage. The pod is terminated whatever fails, unless --keep. A training that
    fails (or is LOST), or a pod that could not be terminated, exits 1.

    Before creating the pod, up shows what it rents and its estimated cost and asks; --yes skips the
    question, and without a terminal up refuses (exit 2) unless --yes is given.

    \b
    Example:
      gputrain runpod up gnn_coloring --gpu B200 --gpus 8 --image me/gnn:latest --data data/
    """
    from gputrain.backends.runpod.up import UpOptions
    from gputrain.backends.table import load_backend
    from gputrain.cli.core import resolve_recipe_path
    from gputrain.cli.launch import launch, plan_requests
    from gputrain.cli.output import warn
    from gputrain.errors import RunPodUsageError

    cloud = cloud.upper()
    if cloud not in ("SECURE", "COMMUNITY"):
        raise RunPodUsageError(f"--cloud {cloud}: use SECURE or COMMUNITY")
    opts = UpOptions(
        recipe_path=resolve_recipe_path(recipe), gpu=gpu, gpus=gpus, image=image, data=data, disk_gb=disk,
        volume_gb=volume, cloud=cloud, data_centers=list(data_center), other_cloud=other_cloud,
        cpu_flavor=cpu_flavor, keep=keep,
        ready_timeout_s=ready_timeout, poll_s=poll, overrides=list(set_), logs_dir=logs_dir,
        remote_dir=remote_dir, bwlimit_kbps=bwlimit, name=name, attach=attach_, reconnect_s=reconnect,
        salvage_s=salvage, keepalive_s=keepalive, lost_create_s=lost_create, retry=retry,
    )
    backend = load_backend("runpod", up=opts, confirm=None if attach_ else (_shown if yes else _ask))
    planned = plan_requests(recipe, backend, logs_dir=logs_dir, gpu=gpu, gpus=gpus, nodes=1, overrides=list(set_))

    def announce(_: object) -> None:
        for warning in planned.warnings:
            warn(warning)

    from gputrain.cli.job_json import emit, job_object, stdout_to_stderr
    from gputrain.errors import JobFailedError

    with stdout_to_stderr(json_):
        launched = launch(backend, planned.requests, follow=True, announce=announce)
    sub = launched.submissions[0]
    outcome = sub.extra["outcome"]
    if not json_:
        _exit_for(outcome, logs_dir)
        return
    job = job_object(sub.job_id, outcome.job_dir or sub.job_dir, outcome.state, outcome.exit_code,
                     pod_id=outcome.pod_id, salvaged=list(outcome.salvaged), pod_live=outcome.pod_live)
    try:
        _exit_for(outcome, logs_dir)
    except JobFailedError as exc:
        emit(job, error=exc.message, exit_code=exc.exit_code)
    emit(job)


def _shown(plan_line: str) -> None:
    """``--yes``: the plan's cost is still shown, not asked about."""
    import sys

    print(f"gputrain: {plan_line}", file=sys.stderr, flush=True)


def _ask(plan_line: str) -> None:
    """Show what ``up`` rents and ask (SkyPilot and dstack do the same); never wait without a terminal."""
    import sys

    from gputrain.cli.output import is_terminal
    from gputrain.errors import RunPodUsageError

    _shown(plan_line)
    if not is_terminal(sys.stdin):
        raise RunPodUsageError("runpod up rents a paid pod and stdin is not a terminal to confirm it on: pass "
                               "--yes to create it")
    print("create this pod? [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise RunPodUsageError("not confirmed: no pod was created (--yes creates it without asking)")


def _exit_for(outcome: object, where: object) -> None:
    """Exit 0 only for a completed training whose pod is gone (or kept on purpose); the last line says what
    was salvaged (never claimed when nothing was) and, when a pod may still bill, how to finish it."""
    from gputrain.backends.runpod.session import Outcome
    from gputrain.errors import JobFailedError

    assert isinstance(outcome, Outcome)
    folder = outcome.job_dir or where
    live = f"; {outcome.billing}" if outcome.pod_live else ""
    if outcome.state == "COMPLETED":
        if outcome.pod_live:
            raise JobFailedError(f"the training completed (results in {folder}), but {outcome.billing}")
        return
    if outcome.exit_code is None:
        reason = outcome.reason.removesuffix(live)
        kept = (f"salvaged into {folder}: {', '.join(outcome.salvaged)}" if outcome.salvaged else
                f"nothing was salvaged (what there is, is in {folder})")
        raise JobFailedError(f"the run ended {outcome.state}: {reason}; {kept}{live}")
    raise JobFailedError(f"the training on the pod exited with {outcome.exit_code} ({outcome.state}); its log "
                         f"and summary are in {folder}{live}")


@app.command()
def attach(
    name: str = typer.Argument(..., help="pod name (job id) of a run started by `runpod up`"),
    reconnect: float = typer.Option(600.0, "--reconnect-timeout", help="seconds to keep reconnecting"),
    salvage: float = typer.Option(300.0, "--salvage-timeout", help="seconds for salvaging results"),
) -> None:
    """Follow a run again after the `runpod up` that started it died (laptop closed, terminal gone).

    The training kept running on the pod. attach follows its log from where the job folder's copy ends,
    downloads (or salvages, on Ctrl-C or a lost pod) and terminates the pod unless the run used --keep.
    While the original `up` is still alive, attach only follows the log.

    \b
    Example:
      gputrain runpod attach gputrain-gnn-coloring-b200x8-1a2b3c4d5e-9f8e7d6c
    """
    from gputrain.backends.runpod.attach import attach as attach_run
    from gputrain.backends.runpod.session import RunSettings

    _exit_for(attach_run(name, RunSettings(reconnect_s=reconnect, salvage_s=salvage)), name)


@app.command("list")
def list_pods(
    all_: bool = typer.Option(False, "--all", help="every live pod of the account, not only gputrain's"),
) -> None:
    """Pods this tool started (registry) with their live status and cost per hour.

    \b
    Examples:
      gputrain runpod list
      gputrain runpod list --all
    """
    from gputrain.backends.runpod.manage import list_rows
    from gputrain.logs.display import terminal_safe

    for row in list_rows(include_foreign=all_):
        print(terminal_safe(row))  # pod names, states and GPU ids come from the API


@app.command()
def status(name: str = typer.Argument(..., help="pod name (job id) or pod id")) -> None:
    """Live status of one pod, its SSH command and cost so far.

    \b
    Example:
      gputrain runpod status gputrain-gnn-coloring-b200x8
    """
    from gputrain.backends.runpod.manage import status_lines
    from gputrain.logs.display import terminal_safe

    for line in status_lines(name):
        print(terminal_safe(line))


@app.command()
def down(
    name: str | None = typer.Argument(None, help="pod name (job id) or pod id"),
    all_: bool = typer.Option(False, "--all", help="terminate every live gputrain-* pod (orphans too)"),
) -> None:
    """Terminate a pod (a pod that is already gone counts as done), salvaging its run first.

    A run whose `up` is still alive is asked to stop (it salvages and terminates); a run nobody drives any
    more has its newest checkpoint, metrics, logs and container log downloaded before the pod goes.

    \b
    Examples:
      gputrain runpod down gputrain-gnn-coloring-b200x8
      gputrain runpod down --all
    """
    from gputrain.backends.runpod.manage import down_all, down_one
    from gputrain.errors import RunPodUsageError

    if all_ == (name is not None):
        raise RunPodUsageError("give a pod NAME or --all (not both)")
    from gputrain.logs.display import terminal_safe

    for line in down_all() if all_ else down_one(str(name)):
        print(terminal_safe(line))


@app.command()
def logs(
    name: str = typer.Argument(..., help="pod name (job id)"),
    follow: bool = typer.Option(False, "--follow", "-f", help="keep printing new lines"),
    pod: bool = typer.Option(False, "--pod", help="the container log from RunPod's API instead"),
) -> None:
    """The job's streamed training log (or the pod's container log with --pod).

    \b
    Examples:
      gputrain runpod logs gputrain-gnn-coloring-b200x8 -f
      gputrain runpod logs gputrain-gnn-coloring-b200x8 --pod
    """
    from gputrain.backends.runpod.manage import print_logs

    print_logs(name, follow=follow, from_api=pod)


def docker(
    recipe: str = typer.Argument(..., help="recipe file, or the name of a bundled recipe"),
    gpu: str = typer.Option(..., "--gpu", help="catalog GPU name the image must support"),
    gpus: int | None = typer.Option(None, "--gpus", help="GPUs per pod for run_multigpu.sh"),
    out: Path = typer.Option(Path("build"), "--out", help="output folder (the docker build context)"),
    set_: list[str] = typer.Option([], "--set", help="override a recipe value: a.b=v"),
) -> None:
    """Write a Docker build context and run scripts for a recipe.

    Writes Dockerfile, build_and_push.sh, run.sh, run_multigpu.sh and plan.json into --out.

    \b
    Example:
      gputrain docker gnn_coloring --gpu B200 --out build/
    """
    from gputrain.backends.runpod.bundle import write_bundle
    from gputrain.cli.core import resolve_recipe_path
    from gputrain.cli.output import progress, warn
    from gputrain.planner import make_plan

    plan = make_plan(resolve_recipe_path(recipe), gpu=gpu, gpus_per_node=gpus, nodes=1, overrides=list(set_),
                     target="docker")
    for warning in plan.warnings:
        warn(warning)
    for path in write_bundle(plan, out):
        print(path)
    progress(f"next: (cd {out} && ./build_and_push.sh <registry>/<image>:<tag>)")


def register(root: typer.Typer) -> None:
    """Add ``docker`` to ``root`` (for embedding; ``gputrain`` itself uses :data:`gputrain.cli.app.COMMANDS`)."""
    root.command("docker")(docker)
