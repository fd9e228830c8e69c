"""``runpod list/status/down/logs``: the registry says which pods are ours, the API says how they are.

``down --all`` also finds orphans: live pods named ``gputrain-*`` that the registry forgot (another machine,
a deleted registry), because a forgotten pod is still billing. ``down NAME`` of a run whose ``up`` is still
alive asks that process to stop (it salvages and terminates); of a run nobody drives any more (the laptop
was closed), it salvages the run's job folder first, then terminates.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from gputrain.backends.runpod.api import RunPodClient, RunPodNotFound, load_api_key
from gputrain.backends.runpod.billing import billed_cost
from gputrain.backends.runpod.pods import NAME_PREFIX, Pod
from gputrain.backends.runpod.ssh import PodShell, forget_key, state_dir
from gputrain.contract.jobstate import ENDED_STATES
from gputrain.errors import GputrainError, RunPodError, RunPodUsageError

if TYPE_CHECKING:
    from gputrain.backends.runpod.owner import PodLock
    from gputrain.registry.store import JobRecord, JobRegistry

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
    """The registry's runs with their pods' live status. Without an API key (or API) the registry alone is
    shown, with a note on stderr: what this machine started is known without asking RunPod."""
    live: dict[str, Pod] | None
    try:
        with _client() as client:
            live = {p.name: p for p in client.list_pods() if p.status != "TERMINATED"}
    except RunPodError as exc:
        live = None
        print(f"gputrain: live status and orphan pods not shown: {exc.message}", file=sys.stderr)
    rows = [f"{'NAME':<48} {'POD':<14} {'STATUS':<12} {'GPU':<22} {'$/h':>6}  JOB DIR"]
    seen = set()
    for rec in _registry().list(limit=200, backend="runpod"):
        if rec.job_id in seen:
            continue
        seen.add(rec.job_id)
        rec = reconcile(rec, pod_gone=live is not None and rec.job_id not in live)
        pod = live.get(rec.job_id) if live is not None else None
        status = pod.status if pod else (f"{rec.state} (no pod)" if live is not None else
                                         f"{rec.state} (pod {rec.extra.get('pod_id') or '-'}, not asked)")
        gpu = f"{rec.gpus_per_node} x {rec.gpu}"
        rows.append(f"{rec.job_id:<48} {pod.id if pod else '-':<14} {status:<12} {gpu:<22} "
                    f"{pod.cost_per_hour if pod else 0.0:>6.2f}  {rec.job_dir or '-'}")
    for name, pod in (live or {}).items():
        if name not in seen and (include_foreign or name.startswith(NAME_PREFIX)):
            note = "" if name.startswith(NAME_PREFIX) else "  (not gputrain's)"
            gpu = f"{pod.gpu_count} x {pod.gpu_id or 'cpu'}"
            rows.append(f"{name:<48} {pod.id:<14} {pod.status:<12} {gpu:<22} "
                        f"{pod.cost_per_hour:>6.2f}  orphan{note}")
    return rows


_RECORD_FIELDS: dict[str, type | tuple[type, ...]] = {
    "pod_name": str, "pod_id": str, "reason": str, "cost_per_hour_usd": (int, float), "uptime_s": (int, float),
    "cost_usd": (int, float), "salvaged": list, "terminated": bool, "live": bool, "attempts": list}
"""What ``PodRun`` writes into ``runpod.json`` besides the state and exit code (session.py)."""


def _written_by_the_run(key: str, value: object) -> bool:
    kind = _RECORD_FIELDS.get(key)
    return kind is not None and isinstance(value, kind) and isinstance(value, bool) == (kind is bool)


def reconcile(record: JobRecord, pod_gone: bool) -> JobRecord:
    """A run the registry still shows live although nobody drives it and its pod is gone (its ``up`` could
    not write the registry: a full disk, a kill): its end state from the job folder's ``runpod.json``, else
    LOST. Recorded, so it is not RUNNING for ever."""
    import json

    from gputrain.backends.runpod.owner import PodLock
    from gputrain.home import UnsafeNameError
    from gputrain.registry.transitions import record_state

    if record.state in FINAL or not pod_gone:
        return record
    try:
        lock = PodLock(record.job_id)
    except UnsafeNameError:
        return record
    if not lock.acquire("reconcile"):
        return record  # its run is alive and will record the end itself
    try:
        ended: dict[str, object] = {}
        if record.job_dir:
            try:
                ended = json.loads((Path(record.job_dir) / "runpod.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                ended = {}
        state = str(ended.get("state") or "")
        if state not in FINAL:
            state, ended = "LOST", {"reason": "its run ended without recording how, and its pod is gone"}
        code = ended.get("exit_code")
        # only the fields (and types) the run's own writer puts there: whatever else wrote the file decides
        # nothing else in the registry
        extra = {k: v for k, v in ended.items() if _written_by_the_run(k, v)}
        try:
            return record_state(_registry(), record.job_id, state,
                                exit_code=code if isinstance(code, int) else None, **extra)
        except (sqlite3.Error, OSError, GputrainError):  # still unwritable: show it as it is
            return record
    finally:
        lock.release()


def status_lines(ref: str) -> list[str]:
    with _client() as client:
        name, pods = _resolve(client, ref)
    record = _registry().find(name)
    if record is not None and record.backend == "runpod":
        record = reconcile(record, pod_gone=not pods)
    lines = [f"name:     {name}"]
    if record is not None:
        lines += [f"job:      {record.state} (exit {record.exit_code})", f"job dir:  {record.job_dir}"]
        cost = record.extra.get("cost_usd")
        if cost is not None and not pods:
            lines.append(f"cost:     ${cost:.2f} (billed ${record.extra.get('cost_per_hour_usd', 0):.2f}/h × "
                         f"{float(record.extra.get('uptime_s') or 0) / 60:.1f} min)")
        if record.extra.get("reason"):
            lines.append(f"reason:   {record.extra['reason']}")
    if not pods:
        lines.append("pod:      none live")
        return lines
    for pod in pods:
        created = float(record.extra.get("created_wall") or time.time()) if record is not None else time.time()
        rate = max(pod.cost_per_hour, float(record.extra.get("cost_per_hour_usd") or 0) if record else 0.0)
        spent, uptime = billed_cost(rate, pod.created_at, created, time.time())
        lines += [f"pod:      {pod.id} {pod.status} on {pod.gpu_count} x {pod.gpu_id or 'cpu'} "
                  f"({pod.cloud}, {pod.data_center or 'any'})",
                  f"cost:     ${spent:.2f} so far (billed ${rate:.2f}/h × {uptime / 60:.1f} min up)"]
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
    from gputrain.registry.transitions import record_facts, record_state

    registry = _registry()
    record = registry.find(name)
    if record is not None and record.backend == "runpod" and record.state not in FINAL:
        record_state(registry, record.job_id, "CANCELLED", terminated=True)
    elif record is not None and record.backend == "runpod":
        record_facts(registry, record.job_id, terminated=True)
    forget_key(name)


def down_one(ref: str, salvage_s: float = 300.0, wait_s: float = 600.0) -> list[str]:
    """Terminate one run's pod; salvage first (or let its live ``up`` salvage and terminate)."""
    from gputrain.backends.runpod.owner import PodLock
    from gputrain.home import UnsafeNameError

    with _client() as client:
        name, pods = _resolve(client, ref)
    lock: PodLock | None
    try:
        lock = PodLock(name)
    except UnsafeNameError:  # not a plain name: never ours, nothing to lock
        lock = None
    if lock is not None and pods and not lock.acquire("down"):
        return _stop_live_driver(name, lock, wait_s)
    try:
        out: list[str] = []
        record = _registry().find(name)
        if pods and record is not None and record.backend == "runpod" and record.extra.get("training_started"):
            out += _salvage_for_down(record, pods[0], salvage_s)
        with _client() as client:
            out += list(_terminate(client, pods)) or [f"no live pod named {name}; nothing to terminate"]
        _mark_down(name)
        return out
    finally:
        if lock is not None:
            lock.release()


def _stop_live_driver(name: str, lock: PodLock, wait_s: float) -> list[str]:
    """SIGTERM the ``up``/``attach`` that drives ``name`` (same machine): it salvages and terminates."""
    import os
    import signal
    import socket

    holder = lock.holder() or {}
    pid = holder.get("pid")
    if not isinstance(pid, int) or holder.get("host") != socket.gethostname():
        raise RunPodError(f"pod {name} is driven by another run ({holder or 'unknown'}); stop that run instead")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if lock.holder() is None:
            return [f"asked the run driving {name} (pid {pid}) to stop; it salvaged and terminated the pod"]
        time.sleep(0.5)
    raise RunPodError(f"the run driving {name} (pid {pid}) did not finish within {wait_s:.0f} s")


def _salvage_for_down(record: object, pod: Pod, salvage_s: float) -> list[str]:
    """What ``down`` brings back of a run nobody drives any more, before it terminates the pod."""
    from gputrain.backends.runpod.salvage import keep_container_log, salvage
    from gputrain.errors import GputrainError
    from gputrain.registry.store import JobRecord
    from gputrain.registry.transitions import record_facts

    assert isinstance(record, JobRecord)
    said: list[str] = []
    remote, key = record.extra.get("remote_dir"), _key_of(record.job_id)
    if not record.job_dir or not isinstance(remote, str) or key is None or not key.exists():
        return ["nothing salvaged: the run's folder or ssh key is not recorded here"]
    job_dir = Path(record.job_dir)
    try:
        with _client() as client:
            keep_container_log(client, pod.id, job_dir)
        if pod.ssh_direct is None:
            return [*said, f"nothing salvaged: pod {pod.id} publishes no ssh endpoint ({pod.status})"]
        got = salvage(PodShell(pod.ssh_direct, key), f"{remote}/job", job_dir, salvage_s, said.append)
        record_facts(_registry(), record.job_id, salvaged=got)
        return [*said, f"salvaged into {job_dir}: {', '.join(got) or 'nothing'}"]
    except GputrainError as exc:
        return [*said, f"salvage failed: {exc.message}"]


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
    from gputrain.backends.runpod.salvage import CONTAINER_LOG
    from gputrain.logs.display import safe_lines, terminal_safe

    registry = _registry()
    record = registry.find(ref)
    kept = Path(record.job_dir) / CONTAINER_LOG if record is not None and record.job_dir else None
    if from_api:
        with _client() as client:
            _, pods = _resolve(client, ref)
            if pods:
                for line in client.pod_logs(pods[0].id):
                    print(terminal_safe(line))
                return
        if kept is None or not kept.is_file():
            raise RunPodUsageError(f"no live pod for {ref} and no kept container log (see `gputrain runpod list`)")
        print(safe_lines(kept.read_text(encoding="utf-8", errors="replace")), end="", flush=True)
        return
    if record is None:
        record = registry.get(ref)
    if not record.job_dir:
        raise RunPodError(f"job {ref} has no job folder")
    path = Path(record.job_dir) / "training_output.log"
    if not path.exists() and kept is not None and kept.is_file() and not follow:
        print(f"gputrain: no training log ({record.state}); the pod's container log, kept before it was "
              "terminated:", file=sys.stderr)
        print(safe_lines(kept.read_text(encoding="utf-8", errors="replace")), end="", flush=True)
        return
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
