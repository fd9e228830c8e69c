"""``gputrain runpod up``: one command from recipe to downloaded results, never leaving a paid pod behind.

Order: plan → job folder → pod (reused by name, or created with capacity fallbacks) → ready (RUNNING,
``ssh.direct`` published, ``ssh true`` works, all within a deadline) → upload data, plan and launcher →
run ``run_multigpu.sh`` with output streamed into ``training_output.log`` → download results → terminate.
Everything after the plan sits in one try/finally; SIGINT and SIGTERM become an exception so the finally
runs. A failed termination prints the pod id and the command that finishes the job.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

from gputrain.backends.runpod.api import RunPodCapacityError, RunPodClient, load_api_key
from gputrain.backends.runpod.pods import Pod, cost_so_far, create_body, pod_name
from gputrain.backends.runpod.ssh import PodShell, ensure_key, forget_key
from gputrain.contract import jobstate
from gputrain.errors import GputrainError, RunPodError, RunPodUsageError


def forwarded_secrets(requested: list[str]) -> list[str]:
    """The recipe's secrets that go to the pod: set here, and never a credential of this machine (the
    recipe schema refuses those too; a plan.json edited by hand must not get around it)."""
    from gputrain.recipe.schema import is_launcher_credential

    return [n for n in requested if n in os.environ and not is_launcher_credential(n)]


class Interrupted(GputrainError):
    exit_code = 130


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


@contextmanager
def _signals(up: Up) -> Iterator[None]:
    """One handler for the whole run: SIGINT/SIGTERM raise :class:`Interrupted` (so the ``finally`` runs)
    until clean-up starts; from then on a second Ctrl-C is noted, not obeyed, so the pod is not abandoned.
    Keeping one handler installed throughout leaves no gap in which the default handler could fire."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if up.cleaning_up:
            up.say("still terminating the pod; please wait")
            return
        raise Interrupted(f"interrupted by {signal.Signals(signum).name}")

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class Up:
    def __init__(self, opts: UpOptions, say: Callable[[str], None] | None = None) -> None:
        self.opts = opts
        self.say = say or (lambda msg: print(f"gputrain: {msg}", file=sys.stderr, flush=True))
        self.pod: Pod | None = None
        self.cost_per_hour = 0.0
        self.started = time.monotonic()
        self.create_attempted = False
        self.cleaning_up = False
        self.deadline = time.monotonic()

    # -- the whole run --------------------------------------------------------------------------------
    def run(self) -> int:
        from gputrain.atomic import write_atomic
        from gputrain.backends.runpod.bundle import image_cuda, render_bundle
        from gputrain.home import safe_name
        from gputrain.planner import make_plan
        from gputrain.registry.store import JobRecord, JobRegistry

        opts = self.opts
        if opts.name is not None:
            safe_name(opts.name, "--name")
        api_key = load_api_key()
        first = make_plan(opts.recipe_path, gpu=opts.gpu, gpus_per_node=opts.gpus, nodes=1,
                          overrides=opts.overrides, target="docker")
        name = opts.name or pod_name(first.recipe.name, first.gpu.name, first.gpus_per_node, opts.image,
                                     first.resolved_recipe_data())
        remote = opts.remote_dir or f"/workspace/{name}"
        overrides = list(opts.overrides)
        if opts.data is not None:
            if not opts.data.exists():
                raise RunPodUsageError(f"--data {opts.data}: no such file or folder")
            overrides.append(f"data.source={remote}/data/{opts.data.resolve().name}")
        plan = make_plan(opts.recipe_path, gpu=opts.gpu, gpus_per_node=opts.gpus, nodes=1,
                         overrides=overrides, target="docker") if opts.data is not None else first
        files = render_bundle(plan)

        registry = JobRegistry()
        record = registry.find(name)
        # Continue the earlier job folder only while its pod may still be alive (kept, or not terminated).
        if (record is not None and record.job_dir and Path(record.job_dir).is_dir()
                and not record.extra.get("terminated", False)):
            job_dir = Path(record.job_dir)
        else:
            stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
            job_dir = (opts.logs_dir / f"{plan.recipe.name}_job_{name}_{stamp}").resolve()
            record = None
        for fname in ("plan.json", "run_multigpu.sh"):
            write_atomic(job_dir / fname, files[fname], 0o755 if fname.endswith(".sh") else 0o644)
        extra = {"image": opts.image, "cloud": opts.cloud, "remote_dir": remote, "keep": opts.keep}
        if record is None:
            registry.add(JobRecord(
                job_id=name, backend="runpod", name=name, recipe=plan.recipe.name,
                recipe_path=str(opts.recipe_path), job_dir=str(job_dir), state="PENDING", gpu=plan.gpu.name,
                gpus_per_node=plan.gpus_per_node, nodes=1, extra=extra,
            ))
        else:
            registry.update(name, state="PENDING", extra=extra)
        key, public_key = ensure_key(name)

        self.say(f"job {name}: {job_dir}")
        state, rc = "FAILED", 1
        client = RunPodClient(api_key)
        with _signals(self):
            try:
                cuda = image_cuda(files["Dockerfile"])
                self.pod = self._get_or_create(client, name, plan, public_key, cuda)
                registry.update(name, extra={"pod_id": self.pod.id})
                endpoint = self._wait_ready(client)
                shell = PodShell(endpoint, key)
                shell.wait_until_ready(self.deadline)
                registry.update(name, state="RUNNING")
                sources = [job_dir / "plan.json", job_dir / "run_multigpu.sh"]
                self.say(f"uploading plan and launcher to {endpoint.host}:{endpoint.port}:{remote}")
                shell.upload(sources, remote, opts.bwlimit_kbps)
                if opts.data is not None:
                    self.say(f"uploading data {opts.data} to {remote}/data/")
                    shell.upload([opts.data.resolve()], f"{remote}/data", opts.bwlimit_kbps)
                rc = self._train(client, shell, plan, remote, job_dir)
                self.say(f"training exited with {rc}; downloading results")
                shell.download(f"{remote}/job", job_dir)
                state = jobstate.end_state(rc, jobstate.markers_in(job_dir)).state
            except Interrupted as exc:
                rc = exc.exit_code
                state = jobstate.end_state(rc, (), jobstate.BackendFacts(user_cancelled=True)).state
                self.say(f"{exc}; cleaning up")
                raise
            finally:
                self.cleaning_up = True
                try:
                    self._finish(client, registry, name, job_dir, state, rc)
                finally:
                    client.close()
        return rc

    # -- steps ----------------------------------------------------------------------------------------
    def _get_or_create(self, client: RunPodClient, name: str, plan: Any, public_key: str,
                       cuda: str | None) -> Pod:
        existing = client.find_pods(name)
        if len(existing) > 1:
            ids = ", ".join(p.id for p in existing)
            raise RunPodError(f"{len(existing)} live pods are named {name} ({ids}); terminate the extra ones "
                              f"with `gputrain runpod down {name}` first")
        if existing:
            self.say(f"reusing pod {existing[0].id} ({existing[0].status})")
            return existing[0]
        opts = self.opts
        env = {k: str(v) for k, v in plan.recipe.env.items()}
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
                self.create_attempted = True
                try:
                    pod = client.create_pod(body)
                except RunPodCapacityError as exc:
                    tried.append(where)
                    last = exc
                    self.say(f"no capacity in {where}")
                    continue
                self.started = time.monotonic()
                return pod
        assert last is not None
        hint = "" if opts.other_cloud else "; try --other-cloud"
        hint += "" if opts.data_centers else " or --data-center <id> (several allowed)"
        raise RunPodCapacityError(
            f"RunPod has no {plan.gpus_per_node} x {plan.gpu.name} available right now (tried: "
            f"{'; '.join(tried)}){hint}"
        )

    def _wait_ready(self, client: RunPodClient) -> Any:
        assert self.pod is not None
        self.deadline = time.monotonic() + self.opts.ready_timeout_s
        while True:
            pod = self.pod = client.get_pod(self.pod.id)
            self.cost_per_hour = max(self.cost_per_hour, pod.cost_per_hour)
            if pod.status in ("ERROR", "EXITED", "TERMINATED"):
                raise RunPodError(f"pod {pod.id} went to {pod.status} while starting; see "
                                  f"`gputrain runpod logs {pod.name}`")
            direct = pod.ssh_direct
            if pod.status == "RUNNING" and pod.ssh_problem:
                raise RunPodError(f"pod {pod.id}: {pod.ssh_problem}; not connecting")
            if pod.status == "RUNNING" and direct is not None:
                self.say(f"pod {pod.id} RUNNING, ssh {direct.username}@{direct.host} -p {direct.port}")
                return direct
            if time.monotonic() + self.opts.poll_s > self.deadline:
                raise RunPodError(f"pod {pod.id} not ready within {self.opts.ready_timeout_s:.0f} s (status "
                                  f"{pod.status}, ssh.direct {'set' if pod.ssh_direct else 'not published'})")
            time.sleep(self.opts.poll_s)

    def _train(self, client: RunPodClient, shell: PodShell, plan: Any, remote: str, job_dir: Path) -> int:
        """Secrets travel as shell assignments on ssh's stdin: never in the pod's env, argv or a file."""
        names = forwarded_secrets(list(plan.recipe.secrets))
        self.say(f"secrets forwarded to the pod (by name): {', '.join(names) or 'none'}")
        exports = "".join(f"{n}={shlex.quote(os.environ[n])}\n" for n in names)
        command = (f"cd {shlex.quote(remote)} && set -a && eval \"$(cat)\" && set +a && "
                   f"GPUTRAIN_JOB_DIR={shlex.quote(remote + '/job')} exec bash run_multigpu.sh")
        last_cost = time.monotonic()
        log = open(job_dir / "training_output.log", "a", encoding="utf-8")  # noqa: SIM115

        def on_line(line: str) -> None:
            nonlocal last_cost
            log.write(line + "\n")
            log.flush()
            print(line, flush=True)
            if time.monotonic() - last_cost >= 60:
                last_cost = time.monotonic()
                self.say(f"cost so far ${self.cost():.2f}")

        try:
            return shell.stream(command, exports, on_line)
        finally:
            log.close()

    def cost(self) -> float:
        if self.pod is None:
            return 0.0
        pod = self.pod if self.pod.cost_per_hour else Pod(**{**self.pod.__dict__, "cost_per_hour":
                                                               self.cost_per_hour})
        return cost_so_far(pod, self.started, time.monotonic())

    def _finish(self, client: RunPodClient, registry: Any, name: str, job_dir: Path, state: str,
                rc: int) -> None:
        from gputrain.atomic import write_atomic

        cost = self.cost()
        pods = [self.pod] if self.pod is not None else []
        if not pods and self.create_attempted:
            try:  # a create whose answer was lost may still have made a pod
                pods = client.find_pods(name)
            except RunPodError as exc:
                self.say(f"could not check for a pod named {name}: {exc}")
        terminated = True
        if not self.opts.keep:
            for pod in pods:
                try:
                    gone_now = client.delete_pod(pod.id)
                    self.say(f"pod {pod.id} {'terminated' if gone_now else 'was already gone'}")
                except RunPodError as exc:
                    terminated = False
                    self.say(f"error: could not terminate pod {pod.id}: {exc}")
                    self.say(f"the pod is still billing; finish it with: gputrain runpod down {name}   "
                             f"(or in RunPod's console: terminate pod {pod.id})")
            if terminated:
                forget_key(name)
        elif pods:
            self.say(f"--keep: pod {pods[0].id} left running; finish it with: gputrain runpod down {name}")
        summary = {"pod_name": name, "pod_id": pods[0].id if pods else None, "state": state, "exit_code": rc,
                   "cost_per_hour_usd": self.cost_per_hour, "cost_usd": round(cost, 4),
                   "terminated": bool(pods) and terminated and not self.opts.keep}
        self.say(f"{state}: cost so far ${cost:.2f} (${self.cost_per_hour:.2f}/h)")
        import json

        write_atomic(job_dir / "runpod.json", json.dumps(summary, indent=2) + "\n")
        registry.update(name, state=state, exit_code=rc, extra={k: v for k, v in summary.items()
                                                                 if k not in ("state", "exit_code")})
