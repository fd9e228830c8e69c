"""``gputrain runpod up``: one command from recipe to downloaded results, never leaving a paid pod behind.

Order: plan → the run's own pod name (``<recipe/config base>-<run id>``; ``--name`` to choose one) and its
lock (:mod:`~gputrain.backends.runpod.owner`) → job folder → pod (created with capacity fallbacks, or a
kept pod of that name taken over) → ready (RUNNING, ``ssh.direct`` published, ``ssh true`` works, within a
deadline) → upload data, plan, launcher → start the training detached on the pod
(:mod:`~gputrain.backends.runpod.remote`) → follow it, reconnecting on drops → download, or salvage → keep
the container log → terminate (:mod:`~gputrain.backends.runpod.session`). SIGINT/SIGTERM salvage and
terminate; a second one skips the salvage. A failed termination prints the pod id and the command that
finishes the job.
"""

from __future__ import annotations

import functools
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gputrain.backends.runpod.api import RunPodCapacityError, RunPodClient, load_api_key
from gputrain.backends.runpod.owner import (
    OWNER_ENV,
    PodLock,
    busy_error,
    foreign_owner_error,
    new_run_id,
    owner_host,
    owner_label,
    run_pod_name,
)
from gputrain.backends.runpod.pods import Pod, create_body, pod_name
from gputrain.backends.runpod.remote import DETACH_SCRIPT, STATE
from gputrain.backends.runpod.session import Outcome, PodRun, PodStartFailed, RunSettings, tell
from gputrain.backends.runpod.ssh import PodShell, ensure_key
from gputrain.errors import RunPodError, RunPodUsageError
from gputrain.recipe.schema import GENERATED_DATA_ONLY


def forwarded_secrets(requested: list[str]) -> list[str]:
    """The recipe's secrets that go to the pod: set here, and never a credential of this machine (the
    recipe schema refuses those too; a plan.json edited by hand must not get around it)."""
    from gputrain.recipe.schema import is_launcher_credential, is_runtime_switch

    return [n for n in requested if n in os.environ and not is_launcher_credential(n) and not is_runtime_switch(n)]


@dataclass
class UpOptions:
    recipe_path: Path
    gpu: str
    gpus: int | None
    image: str
    data: Path | None = None
    disk_gb: int = 100
    volume_gb: int | None = None
    cloud: str = "SECURE"
    data_centers: list[str] = field(default_factory=list)
    other_cloud: bool = False
    cpu_flavor: str = "cpu3c"
    keep: bool = False
    ready_timeout_s: float = 900.0
    poll_s: float = 5.0
    overrides: list[str] = field(default_factory=list)
    logs_dir: Path = Path("logs")
    remote_dir: str | None = None
    bwlimit_kbps: int | None = None
    name: str | None = None
    attach: bool = False
    reconnect_s: float = 600.0
    salvage_s: float = 300.0
    stop_grace_s: float = 30.0
    log_idle_s: float = 3.0
    keepalive_s: int = 15
    plan: Any = None  # the JobPlan already made for the run (gputrain.cli.launch); None: plan it here
    lost_create_s: float = 120.0
    """How long a create whose answer was lost is looked for by name (the server may make the pod late)."""
    retry: int = 0
    """Relaunches after an eviction (the host took the pod), each on a new pod from the newest salvaged
    checkpoint, as SkyPilot's managed jobs recover spot preemptions."""


class Up:
    def __init__(self, opts: UpOptions, say: Callable[[str], None] | None = None,
                 confirm: Callable[[str], None] | None = None) -> None:
        """``confirm`` is shown the plan's cost before anything is created or written and raises to refuse
        (the CLI asks on a terminal, or requires ``--yes``); None: no question (the Python API)."""
        self.opts = opts
        self.confirm = confirm
        self.say = say or tell
        self.run_id = new_run_id()
        self.pod_run: PodRun | None = None
        self.deadline = time.monotonic()

    # -- the whole run --------------------------------------------------------------------------------
    def go(self) -> Outcome:
        """Plan, take the pod name, create the pod, train detached, follow, and always finish (see
        :class:`~gputrain.backends.runpod.session.PodRun`). ``--attach`` follows a live run instead."""
        from gputrain.atomic import write_atomic
        from gputrain.backends.runpod.bundle import render_bundle
        from gputrain.home import safe_name
        from gputrain.planner import make_plan
        from gputrain.registry.store import JobRecord, JobRegistry
        from gputrain.registry.transitions import record_job

        opts = self.opts
        if opts.name is not None:
            safe_name(opts.name, "--name")
        api_key = load_api_key()
        first = opts.plan or make_plan(opts.recipe_path, gpu=opts.gpu, gpus_per_node=opts.gpus, nodes=1,
                                       overrides=opts.overrides, target="docker")
        from gputrain.recipe.plan_only import refuse_plan_only

        refuse_plan_only(first.recipe)
        base = pod_name(first.recipe.name, first.gpu.name, first.gpus_per_node, opts.image,
                        first.resolved_recipe_data())
        registry = JobRegistry()
        if opts.attach:
            from gputrain.backends.runpod.attach import attach, live_run_of

            return attach(opts.name or live_run_of(registry, base), self.settings(), say=self.say)
        name = opts.name or run_pod_name(base, self.run_id)
        if self.confirm is not None:
            self.confirm(cost_line(first, opts, name))
        lock = PodLock(name)
        if not lock.acquire(self.run_id):
            raise busy_error(name, lock.holder())
        try:
            remote = f"{(opts.remote_dir or '/workspace').rstrip('/')}/{name}"
            overrides = list(opts.overrides)
            if opts.data is not None:
                if not opts.data.exists():
                    raise RunPodUsageError(f"--data {opts.data}: no such file or folder")
                if first.recipe.entrypoint in GENERATED_DATA_ONLY:  # it reads no data.source: say so, not refuse
                    self.say(f"--data {opts.data}: uploaded to {remote}/data/, but {first.recipe.entrypoint} "
                             "generates its own data and does not read it")
                else:
                    overrides.append(f"data.source={remote}/data/{opts.data.resolve().name}")
            plan = make_plan(opts.recipe_path, gpu=opts.gpu, gpus_per_node=opts.gpus, nodes=1,
                             overrides=overrides, target="docker") if opts.data is not None else first
            files = render_bundle(plan)
            files[f"{STATE}/detach.sh"] = DETACH_SCRIPT
            stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
            job_dir = (opts.logs_dir / f"{plan.recipe.name}_job_{name}_{stamp}").resolve()
            for fname in ("plan.json", "run_multigpu.sh", f"{STATE}/detach.sh"):
                write_atomic(job_dir / fname, files[fname], 0o755 if fname.endswith(".sh") else 0o644)
            extra = {"image": opts.image, "cloud": opts.cloud, "remote_dir": remote, "keep": opts.keep,
                     "run_id": self.run_id, "owner": owner_label(self.run_id), "base_name": base}
            record_job(registry, JobRecord(
                job_id=name, backend="runpod", name=name, recipe=plan.recipe.name,
                recipe_path=str(opts.recipe_path), job_dir=str(job_dir), state="PENDING", gpu=plan.gpu.name,
                gpus_per_node=plan.gpus_per_node, nodes=1, extra=extra,
            ))
            self.say(f"job {name}: {job_dir}")
            client = RunPodClient(api_key, lost_create_s=opts.lost_create_s,
                                  lost_create_poll_s=min(5.0, max(0.1, opts.lost_create_s / 10)))
            try:
                return self._attempts(client, registry, name, job_dir, remote, plan, files)
            finally:
                client.close()
        finally:
            lock.release()

    def _attempts(self, client: RunPodClient, registry: Any, name: str, job_dir: Path, remote: str, plan: Any,
                  files: dict[str, str]) -> Outcome:
        """The first pod, then (``--retry N``) a new pod per eviction, resumed from the newest checkpoint
        salvaged into the job folder; every attempt is kept in ``runpod.json``/``summary.json``."""
        from gputrain.backends.runpod.salvage import newest_checkpoint

        history: list[dict[str, Any]] = []
        resume: str | None = None
        while True:
            key, public_key = ensure_key(name)
            run = self.pod_run = PodRun(client, registry, name, job_dir, remote, self.settings(), say=self.say)
            run.attempts = history
            run.resumed_from = resume
            outcome = run.execute(functools.partial(self._body, run, plan, files, key, public_key, job_dir, resume))
            if not (run.evicted and outcome.state == "LOST" and len(history) <= self.opts.retry):
                return outcome
            ckpts = job_dir / "checkpoints"
            resume = newest_checkpoint([p.name for p in ckpts.iterdir()] if ckpts.is_dir() else [])
            self.say(f"attempt {len(history)} was evicted; relaunching on a new pod (retry {len(history)} of "
                     f"{self.opts.retry}) from {f'checkpoint {resume}' if resume else 'the start'}")

    def run(self) -> int:
        """The training's exit code (1 when it is unknown: LOST, or failed before the training ended, and
        whenever the pod may still bill)."""
        outcome = self.go()
        if outcome.pod_live:
            return 1
        return outcome.exit_code if outcome.exit_code is not None else 1

    def settings(self) -> RunSettings:
        o = self.opts
        return RunSettings(keep=o.keep, reconnect_s=o.reconnect_s, salvage_s=o.salvage_s,
                           stop_grace_s=o.stop_grace_s, log_idle_s=o.log_idle_s, keepalive_s=o.keepalive_s)

    def _body(self, run: PodRun, plan: Any, files: dict[str, str], key: Path, public_key: str,
              job_dir: Path, resume: str | None = None) -> int:
        from gputrain.backends.runpod.bundle import image_cuda
        from gputrain.registry.transitions import record_facts

        opts = self.opts
        run.pod = self._get_or_create(run, run.name, plan, public_key, image_cuda(files["Dockerfile"]))
        run.cost_per_hour = max(run.cost_per_hour, run.pod.cost_per_hour)
        record_facts(run.registry, run.name, pod_id=run.pod.id, created_wall=run.created_wall,
                     cost_per_hour_usd=run.cost_per_hour, live=True)
        endpoint = self._wait_ready(run)
        shell = run.shell = PodShell(endpoint, key, keepalive_s=opts.keepalive_s)
        shell.wait_until_ready(self.deadline)
        remote = run.remote
        sources = [job_dir / "plan.json", job_dir / "run_multigpu.sh", job_dir / STATE]
        self.say(f"uploading plan and launcher to {endpoint.host}:{endpoint.port}:{remote}")
        if resume is not None:  # a retry: no state of the evicted attempt's launcher may be taken for this one's
            q = shlex.quote
            shell.run_checked(" ".join(f"rm -f {q(f'{remote}/{STATE}/{n}')};" for n in
                                       ("pid", "exit_code", "child.pid", "run.out")), "clear the old run state")
        shell.upload(sources, remote, opts.bwlimit_kbps)
        if resume is not None:
            self.say(f"uploading checkpoint {resume} to resume from")
            shell.upload([job_dir / "checkpoints" / resume], f"{remote}/job/checkpoints", opts.bwlimit_kbps)
        if opts.data is not None:
            self.say(f"uploading data {opts.data} to {remote}/data/")
            shell.upload([opts.data.resolve()], f"{remote}/data", opts.bwlimit_kbps)
        names = forwarded_secrets(list(plan.recipe.secrets))
        self.say(f"secrets forwarded to the pod (by name): {', '.join(names) or 'none'}")
        run.launch("".join(f"{n}={shlex.quote(os.environ[n])}\n" for n in names))
        self.say("training started, detached on the pod (it keeps running if this connection drops; "
                 f"`gputrain runpod attach {run.name}` follows it again)")
        return run.follow_to_end()

    # -- steps ----------------------------------------------------------------------------------------
    def _get_or_create(self, run: PodRun, name: str, plan: Any, public_key: str, cuda: str | None) -> Pod:
        """A pod of this name that survives from an earlier run of this machine (``--keep``) is taken over
        (this run holds the name's lock, so its old driver is gone); one owned from another machine is not."""
        client = run.client
        existing = client.find_pods(name)
        if len(existing) > 1:
            ids = ", ".join(p.id for p in existing)
            raise RunPodError(f"{len(existing)} live pods are named {name} ({ids}); terminate the extra ones "
                              f"with `gputrain runpod down {name}` first")
        if existing:
            label = existing[0].owner
            if label and owner_host(label) != owner_host(owner_label(self.run_id)):
                raise foreign_owner_error(name, label)
            self.say(f"taking over pod {existing[0].id} ({existing[0].status}): no live run drives it")
            return existing[0]
        opts = self.opts
        env = {k: str(v) for k, v in plan.recipe.env.items()}
        env[OWNER_ENV] = owner_label(self.run_id)
        ids = plan.gpu.runpod_ids
        if not plan.gpu.is_cpu and not ids:
            raise RunPodUsageError(f"GPU {plan.gpu.name} has no RunPod id in the catalog; pick another --gpu")
        clouds = [opts.cloud] + ([c for c in ("SECURE", "COMMUNITY") if c != opts.cloud] if opts.other_cloud
                                 else [])
        centres: list[list[str] | None] = [[dc] for dc in opts.data_centers] or [None]
        tried: list[str] = []
        last: RunPodCapacityError | None = None
        for cloud in clouds:
            for dcs in centres:
                body = create_body(
                    name=name, image=opts.image, gpu_id=ids[0] if ids else "", gpu_count=plan.gpus_per_node,
                    disk_gb=opts.disk_gb, volume_gb=opts.volume_gb, env=env, public_key=public_key,
                    cloud=cloud, data_centers=dcs, min_cuda=cuda,
                    volume_path=(opts.remote_dir or "/workspace").rstrip("/") or "/workspace",
                )
                if plan.gpu.is_cpu:
                    body.pop("gpu")
                    body.pop("mounts", None)
                    vcpus = 2
                    while vcpus < 2 * plan.gpus_per_node:
                        vcpus *= 2
                    body["cpu"] = {"id": opts.cpu_flavor, "vcpuCount": vcpus}
                where = f"{cloud} cloud, data centre {dcs[0] if dcs else 'any'}"
                self.say(f"creating pod {name}: {plan.gpus_per_node} x {plan.gpu.name} ({where})")
                run.create_attempted = True
                try:
                    pod = client.create_pod(body)
                except RunPodCapacityError as exc:
                    tried.append(where)
                    last = exc
                    self.say(f"no capacity in {where}")
                    continue
                run.created_wall = time.time()
                return pod
        assert last is not None
        hint = "" if opts.other_cloud else "; try --other-cloud"
        hint += "" if opts.data_centers else " or --data-center <id> (several allowed)"
        raise RunPodCapacityError(
            f"RunPod has no {plan.gpus_per_node} x {plan.gpu.name} available right now (tried: "
            f"{'; '.join(tried)}){hint}"
        )

    def _wait_ready(self, run: PodRun) -> Any:
        assert run.pod is not None
        self.deadline = time.monotonic() + self.opts.ready_timeout_s
        while True:
            pod = run.pod = run.client.get_pod(run.pod.id)
            run.cost_per_hour = max(run.cost_per_hour, pod.cost_per_hour)
            if pod.status in ("ERROR", "EXITED", "TERMINATED"):
                raise PodStartFailed(f"pod {pod.id} went to {pod.status} while starting")
            direct = pod.ssh_direct
            if pod.status == "RUNNING" and pod.ssh_problem:
                raise RunPodError(f"pod {pod.id}: {pod.ssh_problem}; not connecting")
            if pod.status == "RUNNING" and direct is not None:
                self.say(f"pod {pod.id} RUNNING, ssh {direct.username}@{direct.host} -p {direct.port}")
                return direct
            if time.monotonic() + self.opts.poll_s > self.deadline:
                raise RunPodError(f"pod {pod.id} not ready within {self.opts.ready_timeout_s:.0f} s (status "
                                  f"{pod.status}, ssh.direct {'set' if pod.ssh_direct else 'not published'}); "
                                  f"{_not_ready_hint(pod.status, self.opts)}")
            time.sleep(self.opts.poll_s)


def _not_ready_hint(status: str, opts: UpOptions) -> str:
    """What to do about a pod that did not get ready (it is terminated either way)."""
    if status == "PROVISIONING":
        where = "" if opts.other_cloud else ", --other-cloud"
        where += "" if opts.data_centers else ", --data-center <id>"
        return (f"RunPod found no machine to start it on; it is terminated — run `up` again later, or try{where} "
                "or another --gpu")
    if status == "STARTING":
        return ("the image may still be downloading; it is terminated — a large image needs a longer "
                "--ready-timeout, and `gputrain runpod logs NAME --pod` shows the container log while a pod lives")
    return "it is terminated — check that the image starts sshd with PUBLIC_KEY (see `gputrain docker`)"


def cost_line(plan: Any, opts: UpOptions, name: str) -> str:
    """What ``up`` is about to rent and what it should cost, from the catalog price and the plan's estimate
    (RunPod bills its own rate, shown once the pod exists, from creation to termination)."""
    count, gpu = plan.gpus_per_node, plan.gpu
    rate = float(gpu.price_usd_hour or 0.0) * count
    est = plan.estimate
    hours = est.total_hours
    total = f"about ${est.cost_usd:.2f} for the estimated {hours:.1f} h" if hours and est.cost_usd else \
        "no duration estimate for this recipe"
    keep = "; --keep: it bills until `gputrain runpod down " + name + "`" if opts.keep else ""
    return (f"pod {name}: {count} x {gpu.name} ({opts.cloud} cloud), image {opts.image}, {opts.disk_gb} GB disk"
            f"{f', {opts.volume_gb} GB volume' if opts.volume_gb else ''}; catalog ${rate:.2f}/h, {total} "
            f"(RunPod bills its own rate from creation to termination){keep}")
