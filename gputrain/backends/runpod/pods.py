"""Pods as gputrain sees them: the typed subset of the API's Pod object, the pod name and the create body.

The base of a pod name is deterministic (recipe, GPU, count, image and the resolved config); each run adds
its own id (:mod:`gputrain.backends.runpod.owner`). Pure functions only; no HTTP here.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Any

from gputrain.errors import RunPodError

LIVE_STATES = ("PROVISIONING", "STARTING", "RUNNING", "EXITED", "ERROR")
NAME_PREFIX = "gputrain-"


_USER_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_.-]{0,31}\Z")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_RE = re.compile(rf"\A{_LABEL}(?:\.{_LABEL})*\Z")


@dataclass(frozen=True)
class SshEndpoint:
    """Where a pod's sshd listens. Built from API data, so each part is checked before it can reach an
    ``ssh``/``scp``/``rsync`` command line: a user name such as ``-oProxyCommand=...`` is an option there."""

    host: str
    port: int
    username: str

    def __post_init__(self) -> None:
        if not _USER_RE.match(self.username):
            raise RunPodError(f"the API gave the ssh user {self.username[:40]!r}, which is not a user name")
        try:
            # An IPv6 scope id (``fe80::1%<text>``) is free text to ipaddress and names an interface of this
            # machine, never a pod's public address: refused with the rest.
            scoped = getattr(ipaddress.ip_address(self.host), "scope_id", None) is not None
        except ValueError:
            scoped = not _HOST_RE.match(self.host) or len(self.host) > 253
        if scoped:
            raise RunPodError(f"the API gave the ssh host {self.host[:60]!r}, which is not a host name or "
                              "address")
        if not 0 < self.port < 65536:
            raise RunPodError(f"the API gave the ssh port {self.port}, which is not a port")

    @property
    def copy_host(self) -> str:
        """The host as rsync and scp read it in ``user@host:path``: an IPv6 address in brackets (they split at
        the first colon; unbracketed, ``2001:db8::7`` is host ``2001``). ssh itself wants it bare."""
        return f"[{self.host}]" if ":" in self.host else self.host


@dataclass(frozen=True)
class Pod:
    id: str
    name: str
    status: str
    cost_per_hour: float
    gpu_id: str | None
    gpu_count: int
    cloud: str | None
    data_center: str | None
    ssh_direct: SshEndpoint | None
    created_at: str | None
    started_at: str | None
    ssh_problem: str | None = None
    """Why the API's ssh endpoint was refused (it is then ``None``)."""
    owner: str | None = None
    """The ``GPUTRAIN_OWNER`` label in the pod's env: which run (``<host>/<run id>``) drives it."""
    volume_path: str | None = None
    """Where the pod's persistent volume is mounted: what survives the pod being stopped (EXITED)."""

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> Pod:
        ssh = data.get("ssh") or {}
        direct = ssh.get("direct") if isinstance(ssh, dict) else None
        endpoint = None
        problem = None
        if isinstance(direct, dict) and direct.get("host") and direct.get("port"):
            user = str(direct.get("username") or "root")
            try:
                endpoint = SshEndpoint(str(direct["host"]), int(direct["port"]), user)
            except (RunPodError, ValueError, TypeError) as exc:
                problem = str(exc)
        gpu = data.get("gpu") or {}
        if not isinstance(gpu, dict):
            raise ValueError(f"field 'gpu' is {str(gpu)[:40]!r}, not an object")
        env = data.get("env")
        owner = env.get("GPUTRAIN_OWNER") if isinstance(env, dict) else None
        return cls(
            id=_text(data.get("id"), "id") or "",
            name=_text(data.get("name"), "name") or "",
            status=_text(data.get("status"), "status") or "UNKNOWN",
            cost_per_hour=_number(data.get("cost"), "cost", float),
            gpu_id=_text(gpu.get("id"), "gpu.id"),
            gpu_count=int(_number(gpu.get("count"), "gpu.count", int)),
            cloud=_text(data.get("cloud"), "cloud"),
            data_center=_text(data.get("dataCenterId"), "dataCenterId"),
            ssh_direct=endpoint,
            created_at=_text(data.get("createdAt"), "createdAt"),
            started_at=_text(data.get("startedAt"), "startedAt"),
            ssh_problem=problem,
            owner=str(owner)[:200] if owner else None,
            volume_path=_volume_path(data.get("mounts")),
        )

    @property
    def ready_for_ssh(self) -> bool:
        return self.status == "RUNNING" and self.ssh_direct is not None


def _text(value: Any, field: str) -> str | None:
    """A text field of an API answer (None when absent); another type (a ``createdAt`` of ``1732600000``)
    names the field instead of failing later, in the billing or in a URL."""
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"field '{field}' is {str(value)[:40]!r}, not text")


def _number(value: Any, field: str, kind: type[float] | type[int]) -> float:
    """A numeric field of an API answer; a wrong type (a cost of ``"0.50/h"``) names the field."""
    if value is None or value == "":
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"field '{field}' is {str(value)[:40]!r}, not a number")
    try:
        return float(kind(value))
    except ValueError:
        raise ValueError(f"field '{field}' is {str(value)[:40]!r}, not a number") from None


def _volume_path(mounts: Any) -> str | None:
    persistent = mounts.get("persistent") if isinstance(mounts, dict) else None
    path = persistent.get("path") if isinstance(persistent, dict) else None
    return path if isinstance(path, str) and path.startswith("/") else None


def pod_name(recipe: str, gpu: str, count: int, image: str, config: dict[str, Any]) -> str:
    """``gputrain-<recipe>-<gpu>x<count>-<hash>``: same inputs, same pod."""
    digest = hashlib.sha256(
        json.dumps([recipe, gpu, count, image, config], sort_keys=True, default=str).encode()
    ).hexdigest()[:10]
    slug = re.sub(r"[^a-z0-9]+", "-", f"{recipe}-{gpu}x{count}".lower()).strip("-")[:40]
    return f"{NAME_PREFIX}{slug}-{digest}"


def create_body(
    *,
    name: str,
    image: str,
    gpu_id: str,
    gpu_count: int,
    disk_gb: int,
    volume_gb: int | None,
    env: dict[str, str],
    public_key: str,
    cloud: str,
    data_centers: list[str] | None,
    min_cuda: str | None,
    volume_path: str = "/workspace",
) -> dict[str, Any]:
    """The CreatePodRequest body. The per-run public key rides in ``PUBLIC_KEY``, which the image's entry
    script (templates/run.sh.j2) installs before starting sshd; secrets never go into ``env``."""
    gpu: dict[str, Any] = {"id": gpu_id, "count": gpu_count}
    if min_cuda:
        gpu["minCudaVersion"] = min_cuda
    body: dict[str, Any] = {
        "name": name,
        "image": image,
        "gpu": gpu,
        "cloud": cloud,
        "disk": disk_gb,
        "ports": ["22/tcp"],
        "env": {**env, "PUBLIC_KEY": public_key},
    }
    if volume_gb:
        body["mounts"] = {"persistent": {"size": max(10, volume_gb), "path": volume_path}}
    if data_centers:
        body["dataCenterIds"] = list(data_centers)
    return body
