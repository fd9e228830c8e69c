"""``runpod list/status/down/logs``: the registry says which pods are ours, the API says how they are.

``down --all`` also finds orphans: live pods named ``gputrain-*`` that the registry forgot (another machine,
a deleted registry), because a forgotten pod is still billing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from gputrain.backends.runpod.api import RunPodClient, RunPodNotFound, load_api_key
from gputrain.backends.runpod.pods import NAME_PREFIX, Pod, cost_so_far
from gputrain.backends.runpod.ssh import PodShell, forget_key, state_dir
from gputrain.contract.jobstate import ENDED_STATES
from gputrain.errors import RunPodError, RunPodUsageError

if TYPE_CHECKING:
    from gputrain.registry.store import JobRegistry

FINAL = ENDED_STATES


def _client() -> RunPodClient:
    return RunPodClient(load_api_key())


def _registry() -> JobRegistry:
    from gputrain.registry.store import JobRegistry

    return JobRegistry()


def _resolve(client: RunPodClient, ref: str) -> tuple[str, list[Pod]]:
    """(pod name, its live pods) for a pod name, a registry job id, or a pod id."""
    record = _registry().find(ref)
    name = record.job_id if record is not None and record.backend == "runpod" else ref
    pods = client.find_pods(name)
    if not pods and record is None:
        try:
            pod = client.get_pod(ref)
        except RunPodNotFound:
            return name, []
        return pod.name, ([pod] if pod.status != "TERMINATED" else [])
    return name, pods


def list_rows(include_foreign: bool = False) -> list[str]:
    with _client() as client:
        live = {p.name: p for p in client.list_pods() if p.status != "TERMINATED"}
    rows = [f"{'NAME':<48} {'POD':<14} {'STATUS':<12} {'GPU':<22} {'$/h':>6}  JOB DIR"]
    seen = set()
    for rec in _registry().list(limit=200, backend="runpod"):
        if rec.job_id in seen:
            continue
        seen.add(rec.job_id)
        pod = live.get(rec.job_id)
        status = pod.status if pod else f"{rec.state} (no pod)"
        gpu = f"{rec.gpus_per_node} x {rec.gpu}"
        rows.append(f"{rec.job_id:<48} {pod.id if pod else '-':<14} {status:<12} {gpu:<22} "
                    f"{pod.cost_per_hour if pod else 0.0:>6.2f}  {rec.job_dir or '-'}")
    for name, pod in live.items():
        if name not in seen and (include_foreign or name.startswith(NAME_PREFIX)):
            note = "" if name.startswith(NAME_PREFIX) else "  (not gputrain's)"
            gpu = f"{pod.gpu_count} x {pod.gpu_id or 'cpu'}"
            rows.append(f"{name:<48} {pod.id:<14} {pod.status:<12} {gpu:<22} "
                        f"{pod.cost_per_hour:>6.2f}  orphan{note}")
    return rows


def status_lines(ref: str) -> list[str]:
    with _client() as client:
        name, pods = _resolve(client, ref)
    record = _registry().find(name)
    lines = [f"name:     {name}"]
    if record is not None:
        lines += [f"job:      {record.state} (exit {record.exit_code})", f"job dir:  {record.job_dir}"]
        cost = record.extra.get("cost_usd")
        if cost is not None:
            lines.append(f"cost:     ${cost:.2f} (at ${record.extra.get('cost_per_hour_usd', 0):.2f}/h)")
    if not pods:
        lines.append("pod:      none live")
        return lines
    for pod in pods:
        spent = cost_so_far(pod, time.monotonic(), time.monotonic())
        lines += [f"pod:      {pod.id} {pod.status} on {pod.gpu_count} x {pod.gpu_id or 'cpu'} "
                  f"({pod.cloud}, {pod.data_center or 'any'})",
                  f"cost:     ${pod.cost_per_hour:.2f}/h, ${spent:.2f} since it started"]
        if pod.ssh_problem:
            lines.append(f"ssh:      refused: {pod.ssh_problem}")
        if pod.ssh_direct is not None:
            key = _key_of(pod.name)
            ssh = PodShell(pod.ssh_direct, key).command_line() if key is not None and key.exists() else (
                f"ssh -p {pod.ssh_direct.port} -- {pod.ssh_direct.username}@{pod.ssh_direct.host}")
            lines.append(f"ssh:      {ssh}")
    return lines


def _key_of(pod_name: str) -> Path | None:
    from gputrain.home import UnsafeNameError

    try:
        return state_dir(pod_name) / "id_ed25519"
    except UnsafeNameError:
        return None


def _terminate(client: RunPodClient, pods: list[Pod]) -> Iterator[str]:
    for pod in pods:
        gone_now = client.delete_pod(pod.id)
        yield f"pod {pod.id} ({pod.name}) {'terminated' if gone_now else 'was already gone'}"


def _mark_down(name: str) -> None:
    registry = _registry()
    record = registry.find(name)
    if record is not None and record.backend == "runpod" and record.state not in FINAL:
        registry.update(record.job_id, state="CANCELLED", extra={"terminated": True})
    elif record is not None and record.backend == "runpod":
        registry.update(record.job_id, extra={"terminated": True})
    forget_key(name)


def down_one(ref: str) -> list[str]:
    with _client() as client:
        name, pods = _resolve(client, ref)
        out = list(_terminate(client, pods)) or [f"no live pod named {name}; nothing to terminate"]
    _mark_down(name)
    return out


def down_all() -> list[str]:
    ours = {r.job_id for r in _registry().list(limit=None, backend="runpod")}
    with _client() as client:
        pods = [p for p in client.list_pods()
                if p.status != "TERMINATED" and (p.name in ours or p.name.startswith(NAME_PREFIX))]
        out = list(_terminate(client, pods)) or ["no live gputrain pods"]
    for pod in pods:
        _mark_down(pod.name)
    return out


def print_logs(ref: str, follow: bool = False, from_api: bool = False, poll_s: float = 1.0) -> None:
    from gputrain.logs.display import safe_lines, terminal_safe

    if from_api:
        with _client() as client:
            _, pods = _resolve(client, ref)
            if not pods:
                raise RunPodUsageError(f"no live pod for {ref} (see `gputrain runpod list`)")
            for line in client.pod_logs(pods[0].id):
                print(terminal_safe(line))
        return
    registry = _registry()
    record = registry.get(ref)
    if not record.job_dir:
        raise RunPodError(f"job {ref} has no job folder")
    path = Path(record.job_dir) / "training_output.log"
    offset = 0
    while True:
        if path.exists():
            with open(path, encoding="utf-8", errors="replace") as fh:
                fh.seek(offset)
                chunk = fh.read()
                offset = fh.tell()
            if chunk:
                print(safe_lines(chunk), end="", flush=True)
        elif not follow:
            raise RunPodError(f"{path}: no training log yet")
        if not follow or registry.get(ref).state in FINAL:
            return
        time.sleep(poll_s)
