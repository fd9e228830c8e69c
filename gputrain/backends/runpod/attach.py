"""``gputrain runpod attach NAME``: follow a run again after the process that started it died.

The training runs detached on the pod, so closing the laptop that ran ``up`` loses nothing but the
follower. ``attach`` takes the run's lock (so it becomes the run's one driver), finds its pod, ssh key,
remote folder and job folder in the registry, and carries on exactly where ``up`` would have: follow the
log from where the local copy ends, download or salvage, keep the container log, terminate (unless the run
was started with ``--keep``). While the original ``up`` is still alive, attach only follows its log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gputrain.backends.runpod.owner import PodLock
from gputrain.backends.runpod.session import Outcome, PodRun, RunSettings, tell
from gputrain.contract import jobstate
from gputrain.errors import RunPodError, RunPodUsageError

if TYPE_CHECKING:
    from gputrain.registry.store import JobRegistry


def live_run_of(registry: JobRegistry, base: str) -> str:
    """The newest unfinished run of this recipe/config (``up --attach`` without ``--name``)."""
    for rec in registry.list(limit=200, backend="runpod"):
        if rec.extra.get("base_name") == base and rec.state in jobstate.LIVE_STATES:
            return rec.job_id
    raise RunPodUsageError(f"no live run of this recipe and config to attach to (pods named {base}-*); "
                           "see `gputrain runpod list`")


def attach(ref: str, settings: RunSettings, say: Callable[[str], None] | None = None) -> Outcome:
    from gputrain.backends.runpod.api import RunPodClient, load_api_key
    from gputrain.backends.runpod.ssh import PodShell, state_dir
    from gputrain.registry.store import JobRegistry

    registry = JobRegistry()
    record = registry.find(ref)
    if record is None or record.backend != "runpod":
        raise RunPodUsageError(f"no RunPod run {ref!r} known to gputrain (see `gputrain runpod list`)")
    name = record.job_id
    say = say or tell
    lock = PodLock(name)
    if not lock.acquire(str(record.extra.get("run_id", ""))):
        holder = lock.holder() or {}
        say(f"run {name} is still driven by pid {holder.get('pid', '?')}; following its log only")
        from gputrain.backends.runpod.manage import print_logs

        print_logs(name, follow=True)
        rec = registry.get(name)
        return Outcome(rec.state, rec.exit_code, str(rec.extra.get("reason") or rec.state))
    try:
        if record.state not in jobstate.LIVE_STATES:
            raise RunPodUsageError(f"run {name} has already ended ({record.state}); its results are in "
                                   f"{record.job_dir}")
        remote, pod_id = record.extra.get("remote_dir"), record.extra.get("pod_id")
        if not record.job_dir or not isinstance(remote, str) or not isinstance(pod_id, str):
            raise RunPodError(f"run {name} has no pod or remote folder recorded; nothing to attach to")
        key = state_dir(name) / "id_ed25519"
        if not key.is_file():
            raise RunPodError(f"run {name}: its ssh key {key} is gone; terminate it with `gputrain runpod down "
                              f"{name}`")
        job_dir = Path(record.job_dir)
        settings.keep = bool(record.extra.get("keep", settings.keep))
        with RunPodClient(load_api_key()) as client:
            run = PodRun(client, registry, name, job_dir, remote, settings, say=say)
            run.created_wall = float(record.extra.get("created_wall") or time.time())
            run.training_started = bool(record.extra.get("training_started"))

            def body() -> int:
                run.pod = client.get_pod(pod_id)
                run.cost_per_hour = max(float(record.extra.get("cost_per_hour_usd") or 0), run.pod.cost_per_hour)
                if run.pod.ssh_direct is None:
                    raise RunPodError(f"pod {pod_id} is {run.pod.status} and publishes no ssh endpoint")
                run.shell = PodShell(run.pod.ssh_direct, key, keepalive_s=settings.keepalive_s)
                if not run.training_started:
                    raise RunPodError(f"run {name} never started its training; terminating its pod")
                log = job_dir / "training_output.log"
                run._remote().offset = log.stat().st_size if log.exists() else 0
                say(f"attached to {name} (pod {pod_id}); following from byte {run._remote().offset}")
                return run.follow_to_end()

            return run.execute(body)
    finally:
        lock.release()
