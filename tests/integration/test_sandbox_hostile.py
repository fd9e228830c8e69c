"""Real hostile programs against the real sandbox, as root and as an unprivileged user.

The trainer side (``sandbox_attacks.py``) runs as its own process: as root, and dropped to a fresh
unprivileged uid with its own HOME (a fake ``~/.ssh/id_ed25519``), a job folder, canary secrets in its
environment and a canary TCP server on 127.0.0.1 that the programs try to reach. Each attack must score 0,
leave nothing running, change nothing outside, and the next good program must still score 1. Each run
reports its isolation level and fails if it is weaker than what this machine allows:

- root: ``namespaces``;
- unprivileged: ``userns`` where unprivileged user namespaces work (as here), else ``landlock``;
- unprivileged with user namespaces switched off (``GPUTRAIN_SANDBOX_DISABLE=userns``): ``landlock``;
- unprivileged with user namespaces and Landlock off: scoring is refused with one line naming the opt-in.
"""

from __future__ import annotations

import json
import os
import pwd
import random
import secrets
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gputrain.train.sandbox.config import blocked_ancestor

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SECRETS = ("WANDB_API_KEY", "HF_TOKEN", "RUNPOD_API_KEY")
WALL_SECONDS = 4.0  # sandbox_attacks.LIMITS.wall_seconds


def _require_root() -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("the hostile suite needs root (to create the unprivileged user it drops to)")
        pytest.skip("needs root to drop to an unprivileged uid")


class CanaryServer:
    """A TCP listener on 127.0.0.1 that records every connection a sandboxed program manages to open."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.accepted.append(conn.recv(256))
                except OSError:
                    self.accepted.append(b"")

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@dataclass
class Site:
    """Everything one run of the suite plants and then inspects."""

    base: Path
    home: Path
    job_dir: Path
    token: str
    shm_key: int
    server: CanaryServer
    secrets: dict[str, str]

    def ctx(self) -> dict[str, Any]:
        return {"port": self.server.port, "home": str(self.home), "job_dir": str(self.job_dir),
                "token": self.token, "shm_key": self.shm_key,
                "ssh_key_text": f"PRIVATE-KEY-{self.token}", "job_text": f"job-metrics-{self.token}"}

    def outside_files(self) -> list[Path]:
        return [self.job_dir / "pwned", self.home / "pwned", Path(f"/tmp/{self.token}-pwned"),
                self.job_dir.parent / "pwned"]


def _unused_uid() -> int:
    taken = {p.pw_uid for p in pwd.getpwall()}
    running = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                running.add(os.stat(f"/proc/{entry}").st_uid)
            except OSError:
                pass
    while True:
        uid = random.randint(61_000, 64_000)
        if uid not in taken and uid not in running:
            return uid


def _user_python() -> str:
    """An interpreter another uid can run: ours, unless it sits under a private folder (pyenv in /root)."""
    if blocked_ancestor(os.path.realpath(sys.executable)) is None:
        return sys.executable
    system = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if system is None or blocked_ancestor(os.path.realpath(system)) is not None:
        pytest.fail("no Python interpreter that an unprivileged user can execute")
    return system


def _copy_packages(dest: Path) -> None:
    """gputrain and the sandbox's bindings where an unprivileged user can read them."""
    import landlockpy
    import pyseccomp

    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "gputrain", dest / "gputrain", ignore=ignore)
    shutil.copytree(Path(landlockpy.__file__).parent, dest / "landlockpy", ignore=ignore)
    shutil.copy(pyseccomp.__file__, dest / "pyseccomp.py")
    shutil.copy(HERE / "sandbox_attacks.py", dest / "sandbox_attacks.py")


@pytest.fixture(scope="module")
def uid() -> int:
    _require_root()
    return _unused_uid()


@pytest.fixture(scope="module")
def site(uid: int) -> Iterator[Site]:
    """Home, job folder and canaries owned by the unprivileged uid (root's runs use them too)."""
    base = Path(subprocess.check_output(["mktemp", "-d", "/tmp/gputrain-hostile-XXXXXX"], text=True).strip())
    base.chmod(0o755)
    token = secrets.token_hex(6)
    home, job = base / "home", base / "jobs" / "job_1"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(f"-----BEGIN-----\nPRIVATE-KEY-{token}\n-----END-----\n")
    job.mkdir(parents=True)
    (job / "metrics.jsonl").write_text(f'{{"note": "job-metrics-{token}"}}\n')
    for path in (home, home / ".ssh", home / ".ssh" / "id_ed25519", job.parent, job, job / "metrics.jsonl"):
        os.chown(path, uid, uid)
        path.chmod(0o600 if path.is_file() else 0o700)
    (base / "pkg").mkdir()
    _copy_packages(base / "pkg")
    subprocess.run(["chmod", "-R", "a+rX", str(base / "pkg")], check=True)
    server = CanaryServer()
    values = {name: f"canary-{name.lower()}-{token}" for name in SECRETS}
    try:
        yield Site(base, home, job, token, random.randint(10_000, 2**30), server, values)
    finally:
        server.close()
        shutil.rmtree(base, ignore_errors=True)


def _run(site: Site, uid: int | None, disable: str = "", only: list[str] | None = None) -> dict[str, Any]:
    """Run the trainer side as ``uid`` (None: root, this interpreter) and return its report."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(site.home), "LANG": "C.UTF-8", **site.secrets}
    if disable:
        env["GPUTRAIN_SANDBOX_DISABLE"] = disable
    ctx = json.dumps({**site.ctx(), "only": only or []})
    if uid is None:
        env["PYTHONPATH"] = str(ROOT)
        argv = [sys.executable, str(HERE / "sandbox_attacks.py"), ctx]
    else:
        env["PYTHONPATH"] = str(site.base / "pkg")
        argv = [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                _user_python(), str(site.base / "pkg" / "sandbox_attacks.py"), ctx]
    proc = subprocess.run(argv, env=env, cwd=str(site.job_dir), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"the trainer side died (exit {proc.returncode}): {proc.stderr[-2000:]}"
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no report from the trainer side: {proc.stderr[-2000:]}"
    return dict(json.loads(lines[-1]))


def _userns_works(uid: int) -> bool:
    probe = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "unshare", "--user",
                            "--map-root-user", "--mount", "--pid", "--net", "--ipc", "--fork", "true"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


def _shm_keys() -> set[int]:
    try:
        lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return set()
    return {int(line.split()[0]) for line in lines if line.split()}


def _check_contained(site: Site, report: dict[str, Any], expected_level: str) -> None:
    sandbox = report["sandbox"]
    print(f"\nsandbox isolation (uid {report['uid']}): {sandbox['level']} — {', '.join(sandbox['layers'])}")
    assert sandbox["level"] == expected_level, f"ran under {sandbox['level']}, required {expected_level}"
    assert sandbox["strong"]
    attacks = report["attacks"]
    assert len(attacks) >= 17
    broken = {name: a for name, a in attacks.items() if a["reward"] != 0.0 or a["good_after"] != 1.0
              or a["leftovers"]}
    assert not broken, json.dumps(broken, indent=1)
    daemon = attacks["daemon_holding_the_pipes"]
    # Bounded, not a benchmark: before, a daemon holding the pipes made scoring wait for it (60 s at 10 s).
    assert daemon["seconds"] <= WALL_SECONDS + 6, daemon
    assert all(s == "timed_out" for s in daemon["statuses"]), daemon
    assert "MemoryError" in " ".join(attacks["memory_hog"]["reasons"])
    assert "output over" in " ".join(attacks["output_flood"]["reasons"])
    assert site.server.accepted == [], "a sandboxed program opened a TCP connection to the canary server"
    for path in site.outside_files():
        assert not path.exists(), f"a sandboxed program wrote {path}"
    assert site.shm_key not in _shm_keys(), "a SysV shared memory segment outlived the program"
    assert (site.job_dir / "metrics.jsonl").read_text().startswith('{"note"')


def test_hostile_programs_as_root_run_in_namespaces(site: Site) -> None:
    _check_contained(site, _run(site, None), "namespaces")


def test_hostile_programs_as_an_unprivileged_user(site: Site, uid: int) -> None:
    expected = "userns" if _userns_works(uid) else "landlock"
    _check_contained(site, _run(site, uid), expected)


def test_hostile_programs_with_landlock_and_seccomp_only(site: Site, uid: int) -> None:
    """What a cluster without unprivileged user namespaces gets: Landlock, seccomp, a non-dumpable trainer."""
    _check_contained(site, _run(site, uid, disable="userns"), "landlock")


def test_no_strong_layer_means_refusal_with_the_opt_in_named(site: Site, uid: int) -> None:
    report = _run(site, uid, disable="userns,landlock", only=["environment_secrets"])
    message = report.get("refused", "")
    assert message, report
    assert "\n" not in message
    assert "GPUTRAIN_SANDBOX_ALLOW_WEAK=1" in message
    assert "userns" in message and "Landlock" in message
