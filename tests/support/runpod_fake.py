"""A local fake of RunPod's REST API v2 (pods endpoints), served over real HTTP on 127.0.0.1, and a
throw-away ``sshd`` on a loopback port that plays the pod's machine.

The fake follows the contract of the published OpenAPI document (``/v2/pods`` list/create,
``/v2/pods/{id}`` get/delete, ``/v2/pods/{id}/action``, ``/v2/pods/{id}/logs``): bearer auth, RFC 9457
problem objects (``application/problem+json``: title, status, detail, errors), unknown request fields
rejected with 422, the full Pod shape in responses, ``Retry-After`` on 429. The compact field description
below (``CREATE_POD_FIELDS``) is this project's own summary of ``CreatePodRequest``.

Pods advance one state per ``GET /v2/pods/{id}``: PROVISIONING → STARTING → RUNNING with ``ssh.direct``
still null for one poll → RUNNING with ``ssh.direct`` pointing at the loopback sshd. Faults are scripted:
``fail_next`` (any status, optional Retry-After, or a dropped connection), ``no_capacity`` (clouds or data
centres refused with RunPod's capacity message) and ``mode`` ("normal", "error": the pod goes to ERROR,
"never_ready": the pod stays STARTING, "stuck_provisioning": it never leaves PROVISIONING); ``evict``
takes a running pod away (EXITED, which the ``start`` action brings back with its volume, or TERMINATED).
Each pod has a container log (``container_log``, served by the logs endpoint as Server-Sent Events); an
ERROR pod's ends with :data:`ERROR_LOG_LINE`.

The sshd can be made to misbehave like a network: :meth:`LoopbackSshd.drop_connections` cuts every open
session, :meth:`LoopbackSshd.pause`/``resume`` stall new connections (SIGSTOP/SIGCONT of the listener),
:meth:`LoopbackSshd.stop` kills it for good.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CAPACITY_DETAIL = (
    "There are no longer any instances available with the requested specifications. "
    "Please refresh and try again."
)
ERROR_LOG_LINE = "error: CUDA driver version is insufficient for CUDA runtime version (container exited 1)"
_CUDA = re.compile(r"^\d+\.\d+$")
_PORT = re.compile(r"^\d{1,5}/(tcp|udp|http)$")


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _int_min(n: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= n


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


def _str_map(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())


def _list_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(check(x) for x in v)


# name -> (check, nested fields or None). Nested objects also reject unknown fields.
GPU_FIELDS: dict[str, Any] = {
    "id": (_str, None),
    "count": (_int_min(1), None),
    "allowedCudaVersions": (_list_of(lambda x: isinstance(x, str) and bool(_CUDA.match(x))), None),
    "minCudaVersion": (lambda v: isinstance(v, str) and bool(_CUDA.match(v)), None),
}
CPU_FIELDS: dict[str, Any] = {
    "id": (lambda v: isinstance(v, str) and len(v) >= 1, None),
    "vcpuCount": (lambda v: _int_min(2)(v) and (v & (v - 1)) == 0, None),  # a power of two
}
MOUNT_FIELDS: dict[str, Any] = {
    "persistent": (lambda v: isinstance(v, dict), {"size": (_int_min(10), None), "path": (_str, None)}),
    "network": (lambda v: isinstance(v, list) and len(v) <= 1, None),
}
CREATE_POD_FIELDS: dict[str, Any] = {
    "name": (lambda v: isinstance(v, str) and len(v) >= 1, None),
    "image": (_str, None),
    "args": (_str, None),
    "disk": (_int_min(1), None),
    "env": (_str_map, None),
    "ports": (_list_of(lambda x: isinstance(x, str) and bool(_PORT.match(x))), None),
    "registry": (lambda v: v is None or isinstance(v, str), None),
    "cloud": (lambda v: v in ("SECURE", "COMMUNITY"), None),
    "cpu": (lambda v: isinstance(v, dict), CPU_FIELDS),
    "dataCenterIds": (_list_of(_str), None),
    "globalNetworking": (_bool, None),
    "gpu": (lambda v: isinstance(v, dict), GPU_FIELDS),
    "mounts": (lambda v: isinstance(v, dict), MOUNT_FIELDS),
    "startJupyter": (_bool, None),
    "startSsh": (_bool, None),
    "templateId": (lambda v: isinstance(v, str) and len(v) >= 1, None),
}
REQUIRED = {"$": ["name"], "$.gpu": ["id"], "$.cpu": ["id", "vcpuCount"], "$.mounts.persistent": ["size", "path"]}


def validate(body: Any, fields: dict[str, Any], where: str = "$") -> list[str]:
    """The violations of ``body`` against a compact field table, worded like the real API's ``errors``."""
    if not isinstance(body, dict):
        return [f"{where}: expected object"]
    errors = [f"{where}: additional properties '{k}' not allowed" for k in body if k not in fields]
    errors += [f"{where}: missing property '{k}'" for k in REQUIRED.get(where, []) if k not in body]
    for key, value in body.items():
        if key not in fields:
            continue
        check, nested = fields[key]
        if not check(value):
            errors.append(f"{where}.{key}: invalid value {value!r}")
        elif nested is not None:
            errors += validate(value, nested, f"{where}.{key}")
    return errors


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    status: int
    times: int = 1
    retry_after: int | None = None
    detail: str = "injected fault"
    drop: bool = False  # do the work, then close the connection without an answer
    late_s: float | None = None  # with drop: do the work only this many seconds after the connection closed
    raw: str | None = None  # answer this text (an HTML error page, a body that breaks the contract) instead
    content_type: str = "text/html"


@dataclass
class FakeRunPod:
    api_key: str
    ssh_host: str = "127.0.0.1"
    ssh_port: int = 22
    ssh_user: str = "root"
    mode: str = "normal"
    cost_per_hour: float = 3.99
    on_create: Callable[[dict[str, Any]], None] | None = None
    no_capacity: set[str] = field(default_factory=set)  # cloud names and/or data centre ids
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    polls: dict[str, int] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    requests: list[tuple[str, str, dict[str, str], Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closing: threading.Event = field(default_factory=threading.Event)

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> FakeRunPod:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeRunPod:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- test controls ---------------------------------------------------------------------------------
    def fail_next(self, method: str, path: str, status: int, **kw: Any) -> None:
        self.faults.append(Fault(method, re.compile(path), status, **kw))

    def evict(self, pod_id: str, status: str = "EXITED") -> None:
        """The host took the pod away (spot reclaim, host failure): EXITED keeps it (and its volume), stopped;
        TERMINATED removes it. Either way its ssh endpoint is gone."""
        with self.lock:
            pod = self.pods[pod_id]
            pod.update(status=status, cost=0.0, runtime=None,
                       actions=["start", "terminate"] if status == "EXITED" else [])
            pod["ssh"]["direct"] = None
            pod["_log"].append(f"pod {status.lower()} by the host")

    def live_pods(self) -> list[dict[str, Any]]:
        with self.lock:
            return [p for p in self.pods.values() if p["status"] != "TERMINATED"]

    def count(self, method: str, path_regex: str) -> int:
        return sum(1 for m, p, _, _ in self.requests if m == method and re.fullmatch(path_regex, p))

    # -- behaviour -------------------------------------------------------------------------------------
    def _create(self, body: dict[str, Any]) -> tuple[int, Any]:
        errors = validate(body, CREATE_POD_FIELDS)
        if "image" not in body and "templateId" not in body:
            errors.append("$: missing property 'image'")
        if errors:
            return 422, _problem(422, "Request validation failed.", errors)
        if ("gpu" in body) == ("cpu" in body):
            return 400, _problem(400, "exactly one of gpu or cpu must be set")
        if "cpu" in body and "persistent" in body.get("mounts", {}):
            return 400, _problem(400, "mounts.persistent is invalid for CPU pods")
        cloud = body.get("cloud", "SECURE")
        centres = body.get("dataCenterIds") or ["*"]
        if cloud in self.no_capacity or all(dc in self.no_capacity for dc in centres):
            return 400, _problem(400, CAPACITY_DETAIL)
        pod_id = secrets.token_hex(5)
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        pod = {
            "id": pod_id, "name": body["name"], "image": body.get("image", ""), "args": body.get("args", ""),
            "disk": body.get("disk", 50), "ports": body.get("ports", []), "env": body.get("env", {}),
            "registry": body.get("registry"), "status": "PROVISIONING", "actions": ["stop", "terminate"],
            "mounts": body.get("mounts", {}),
            "cloud": cloud, "dataCenterId": None if centres == ["*"] else centres[0], "cudaVersion": "12.8",
            "ssh": {"proxy": None, "direct": None}, "template": None, "cost": self.cost_per_hour,
            "locked": False, "globalNetworking": {"enabled": False}, "runtime": None,
            "createdAt": now, "startedAt": None,
        }
        if "gpu" in body:
            pod["gpu"] = {"id": body["gpu"]["id"], "count": body["gpu"].get("count", 1)}
        else:
            pod["cpu"] = {**body["cpu"], "memory": 2 * body["cpu"]["vcpuCount"]}
        pod["_log"] = [f"{now} pulling image {pod['image']}", f"{now} container started"]
        with self.lock:
            self.pods[pod_id] = pod
            self.polls[pod_id] = 0
        if self.on_create is not None:
            self.on_create(body)
        return 201, pod

    def _advance(self, pod: dict[str, Any]) -> None:
        if pod["status"] in ("TERMINATED", "ERROR", "EXITED"):
            return
        n = self.polls[pod["id"]] = self.polls[pod["id"]] + 1
        if self.mode == "stuck_provisioning":
            pod["status"] = "PROVISIONING"
        elif n == 1 or self.mode == "never_ready":
            pod["status"] = "STARTING"
        elif self.mode == "error":
            pod["status"], pod["actions"], pod["cost"] = "ERROR", ["start", "terminate"], 0.0
            pod["_log"].append(ERROR_LOG_LINE)
        else:
            pod["status"], pod["actions"] = "RUNNING", ["stop", "restart", "terminate"]
            pod["startedAt"] = pod["startedAt"] or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            published = n >= 3  # ssh.direct stays null for the first RUNNING poll
            pod["ssh"]["direct"] = (
                {"host": self.ssh_host, "port": self.ssh_port, "username": self.ssh_user,
                 "command": f"ssh {self.ssh_user}@{self.ssh_host} -p {self.ssh_port}"} if published else None
            )
            pod["runtime"] = {"uptime": n, "ports": [{"private": 22, "public": self.ssh_port if published
                                                      else None, "type": "tcp", "ip": self.ssh_host}]}


def _public(pod: dict[str, Any]) -> dict[str, Any]:
    """The API's view of a pod: without the fake's own bookkeeping (keys starting with ``_``)."""
    return {k: v for k, v in pod.items() if not k.startswith("_")}


def _problem(status: int, detail: str, errors: list[str] | None = None) -> dict[str, Any]:
    titles = {400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 409: "Conflict",
              422: "Unprocessable Entity", 429: "Too Many Requests", 500: "Internal Server Error",
              502: "Bad Gateway", 503: "Service Unavailable"}
    out: dict[str, Any] = {"title": titles.get(status, "Error"), "status": status, "detail": detail}
    if errors:
        out["errors"] = errors
    return out


class _Handler(BaseHTTPRequestHandler):
    fake: FakeRunPod
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _send(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        payload = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        ctype = "application/problem+json" if status >= 400 else "application/json"
        if payload:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("RateLimit", '"minute";r=59;t=60')
        self.send_header("RateLimit-Policy", '"minute";q=60;w=60')
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(payload)

    def _handle(self, method: str) -> None:
        fake = self.fake
        path, _, _query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            self._send(400, _problem(400, "request body is not JSON"))
            return
        fake.requests.append((method, path, dict(self.headers), body))
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            self._send(401, _problem(401, "missing bearer token"))
            return
        if auth[len("Bearer "):] != fake.api_key:
            self._send(401, _problem(401, "invalid bearer token"))
            return
        for fault in list(fake.faults):
            if fault.method == method and fault.path.fullmatch(path):
                fault.times -= 1
                if fault.times <= 0:
                    fake.faults.remove(fault)
                if fault.drop:
                    if fault.late_s is None:
                        self._route(method, path, body, answer=False)
                    else:  # the server makes the pod after the client gave up on the answer
                        later = threading.Timer(fault.late_s, fake._create, args=(body,))
                        later.daemon = True
                        later.start()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fault.raw is not None:
                    payload = fault.raw.encode()
                    self.send_response(fault.status)
                    self.send_header("Content-Type", fault.content_type)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                extra = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
                self._send(fault.status, _problem(fault.status, fault.detail), extra)
                return
        self._route(method, path, body)

    def _route(self, method: str, path: str, body: Any, answer: bool = True) -> None:
        fake = self.fake
        send = self._send if answer else (lambda *a, **k: None)
        m = re.fullmatch(r"/v2/pods(?:/([^/]+))?(?:/(action|logs))?", path)
        if not m:
            send(404, _problem(404, "resource not found"))
            return
        pod_id, sub = m.group(1), m.group(2)
        if pod_id is None:
            if method == "GET":
                send(200, {"pods": [_public(p) for p in fake.live_pods()]})
            elif method == "POST":
                status, answer = fake._create(body)
                send(status, _public(answer))
            else:
                send(405, _problem(405, "The requested method is not allowed for this path."))
            return
        with fake.lock:
            pod = fake.pods.get(pod_id)
            if pod is None or pod["status"] == "TERMINATED":
                send(404, _problem(404, "pod not found"))
                return
            terminate = sub == "action" and method == "POST" and body == {"action": "terminate"}
            if (method == "DELETE" and sub is None) or terminate:
                pod.update(status="TERMINATED", cost=0.0, actions=[], runtime=None)
                pod["ssh"]["direct"] = None
                send(204)
                return
            if sub == "action" and method == "POST" and body == {"action": "start"} and pod["status"] == "EXITED":
                pod.update(status="STARTING", cost=fake.cost_per_hour, actions=["stop", "terminate"])
                fake.polls[pod_id] = 1  # RUNNING on the next poll, ssh one poll later
                send(200, _public(pod))
                return
            streaming = sub == "logs" and method == "GET"
            if streaming:
                text = b"".join(
                    f"id: {n}\ndata: {json.dumps({'ts': pod['createdAt'], 'source': 'container', 'line': line})}"
                    f"\n\n".encode() for n, line in enumerate(pod["_log"]))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "keep-alive")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(text), text))
                self.wfile.flush()
            elif method == "GET" and sub is None:
                fake._advance(pod)
                send(200, _public(pod))
                return
        if streaming:  # like the real API, the stream stays open for live lines (none come here)
            fake.closing.wait(30)
            self.close_connection = True
            return
        send(422, _problem(422, "Request validation failed.", [f"$: unsupported request {method} {path}"]))


class LoopbackSshd:
    """Debian's sshd on 127.0.0.1:<free port> with a throw-away host key; logs in as the current user with
    whatever keys ``authorize`` was given. ``SetEnv PATH`` puts this interpreter first, as an image would."""

    def __init__(self, root: Path, env: dict[str, str] | None = None, extra_config: str = "") -> None:
        self.root = root
        self.extra_config = extra_config  # more sshd_config lines (a hostile image: ``ForceCommand ...``)
        self.user = getpass.getuser()
        self.authorized = root / "authorized_keys"
        self.port = _free_port()
        self.env = dict(env or {})

    @staticmethod
    def binary() -> str | None:
        return shutil.which("sshd") or next((p for p in ("/usr/sbin/sshd",) if os.path.exists(p)), None)

    def start(self) -> LoopbackSshd:
        sshd = self.binary()
        if sshd is None:
            raise RuntimeError("sshd is missing: apt-get install -y openssh-server")
        self.root.mkdir(parents=True, exist_ok=True)
        host_key = self.root / "host_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
        self.authorized.touch(mode=0o600)
        path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
        setenv = " ".join(f"{k}={v}" for k, v in {"PATH": path, **self.env}.items())
        config = self.root / "sshd_config"
        config.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile {self.root}/sshd.pid\n"
            f"AuthorizedKeysFile {self.authorized}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
            f"KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nSetEnv {setenv}\n"
            f"Subsystem sftp internal-sftp\nLogLevel ERROR\n{self.extra_config}"
        )
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        with open(self.root / "sshd.log", "w") as log:
            self.proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stderr=log)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.root / 'sshd.log').read_text()}")
            time.sleep(0.1)
        raise RuntimeError("sshd did not start listening")

    def authorize(self, public_key: str) -> None:
        with open(self.authorized, "a") as fh:
            fh.write(public_key.strip() + "\n")

    def stop(self) -> None:
        """Kill the listener and every session it started (idempotent)."""
        self.resume()
        self.drop_connections()
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def _session_pids(self) -> list[int]:
        """The sshd processes under the listener (one or two per open connection); not the user's own."""
        parents: dict[int, int] = {}
        names: dict[int, str] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
            names[int(entry.name)] = comm
        found, frontier = [], [self.proc.pid]
        while frontier:
            parent = frontier.pop()
            for pid, ppid in parents.items():
                if ppid == parent and names[pid].startswith("sshd"):
                    found.append(pid)
                    frontier.append(pid)
        return found

    def drop_connections(self) -> None:
        """Cut every open ssh session, as a dropped network would (the pod's processes keep running)."""
        for pid in self._session_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def pause(self) -> None:
        """New connections hang (the listener is stopped): a pod that is unreachable for a while."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
