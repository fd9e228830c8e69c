"""Real hostile programs against the real sandbox: each scores 0 or is stopped, nothing survives it, the
parent and the files around it are untouched, and a good program run right after still scores 1.0."""

from __future__ import annotations

import os
import socket
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from gputrain.train.sandbox import Job, SandboxLimits, SandboxPool, isolation_level

pytestmark = pytest.mark.integration

if isolation_level() != "namespaces" and os.environ.get("CI") != "true":
    pytest.skip("needs root and unshare (namespaces) on this machine", allow_module_level=True)

LIMITS = SandboxLimits(wall_seconds=8.0, test_seconds=3.0, cpu_seconds=4, memory_mb=512, output_bytes=64_000)
GOOD = Job("def square(x):\n    return x * x\n", ["assert square(3) == 9", "assert square(-2) == 4"])
TESTS = ["assert square(3) == 9", "assert square(-2) == 4", "assert square(0) == 0"]


@pytest.fixture(scope="module")
def pool() -> SandboxPool:
    return SandboxPool(workers=2, limits=LIMITS)


def sandbox_processes(pool: SandboxPool) -> list[psutil.Process]:
    """Live processes of this pool's uids, plus anything still below this test process (the unshare
    wrappers). Other engineers' sandboxes (other uids) and reaped-pending zombies do not count."""
    mine = set(pool.uids)
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.Error:
            pass
    for proc in psutil.process_iter(["uids", "status"]):
        uids = proc.info["uids"]
        if uids and uids.real in mine and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def real_uid(proc: psutil.Process) -> int:
    try:
        return int(proc.uids().real)
    except psutil.Error:
        return -1


def wait_no_leftovers(pool: SandboxPool) -> list[psutil.Process]:
    # The kernel kills a dead namespace's processes asynchronously: poll (no timing assertion).
    for _ in range(300):
        left = sandbox_processes(pool)
        if not left:
            return []
        time.sleep(0.1)
    return sandbox_processes(pool)


def run_hostile(pool: SandboxPool, program: str, tests: list[str] | None = None) -> float:
    result = pool.run(Job(textwrap.dedent(program), tests or TESTS))
    assert result.isolation == "namespaces"
    assert wait_no_leftovers(pool) == []
    good = pool.run(GOOD)
    assert good.fraction == 1.0, good.outcomes
    return result.fraction


def test_leftover_detector_sees_running_sandboxes(pool: SandboxPool) -> None:
    job = Job("import time\ndef square(x):\n    time.sleep(2)\n    return x * x\n", TESTS[:1])
    results = []
    thread = threading.Thread(target=lambda: results.append(pool.run(job)))
    thread.start()
    seen: list[psutil.Process] = []
    while thread.is_alive() and not seen:
        seen = [p for p in sandbox_processes(pool) if real_uid(p) in pool.uids]
        time.sleep(0.05)
    thread.join()
    assert seen, "detector never saw the sandboxed program"
    assert results[0].fraction == 1.0
    assert wait_no_leftovers(pool) == []


def test_good_program_scores_one(pool: SandboxPool) -> None:
    result = pool.run(Job("def square(x):\n    return x * x\n", TESTS))
    assert [o.status for o in result.outcomes] == ["passed"] * 3
    assert pool.run(Job("", TESTS)).fraction == 0.0


def test_infinite_loop_is_timed_out(pool: SandboxPool) -> None:
    result = pool.run(Job("def square(x):\n    while True:\n        pass\n", TESTS[:1]))
    assert result.outcomes[0].status == "timed_out"
    assert run_hostile(pool, "while True:\n    pass\n") == 0.0


def test_fork_bomb_is_contained(pool: SandboxPool) -> None:
    program = """
    import os
    while True:
        try:
            os.fork()
        except OSError:
            pass
    """
    assert run_hostile(pool, program) == 0.0


def test_escaping_fork_bomb_dies_with_namespace(pool: SandboxPool) -> None:
    program = """
    import os, time
    def square(x):
        for _ in range(5):
            if os.fork() == 0:
                os.setsid()
                while True:
                    time.sleep(1)
        return x * x
    """
    assert run_hostile(pool, program) == 1.0  # it answers correctly, yet nothing it forked survives


def test_memory_bomb_fails(pool: SandboxPool) -> None:
    program = """
    chunks = []
    def square(x):
        while True:
            chunks.append(bytearray(50 * 1024 * 1024))
    """
    result = pool.run(Job(textwrap.dedent(program), TESTS[:1]))
    assert result.outcomes[0].status != "passed"
    assert "MemoryError" in result.outcomes[0].reason
    assert run_hostile(pool, "x = bytearray(8 * 1024 ** 3)\n") == 0.0


def test_huge_output_is_capped(pool: SandboxPool) -> None:
    result = pool.run(Job("while True:\n    print('x' * 10000)\n", TESTS))
    assert result.fraction == 0.0
    assert len(result.stdout) <= LIMITS.output_bytes
    assert "output over" in result.outcomes[0].reason
    assert run_hostile(pool, "while True:\n    print('x' * 10000)\n") == 0.0


def test_cannot_write_outside_its_folder(pool: SandboxPool, tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    targets = [open_dir / "pwned", Path("/tmp/gputrain-pwned"), Path(__file__).with_name("pwned.py")]
    program = f"""
    import os
    def square(x):
        for path in {[str(t) for t in targets]!r}:
            try:
                with open(path, "w") as fh:
                    fh.write("pwned")
            except OSError:
                pass
        with open("mine.txt", "w") as fh:  # its own folder is writable
            fh.write(str(x * x))
        with open("mine.txt") as fh:
            return int(fh.read())
    """
    assert run_hostile(pool, program) == 1.0
    for target in targets:
        assert not target.exists()


def test_env_secret_does_not_reach_program(pool: SandboxPool, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "canary-" + os.urandom(8).hex()
    monkeypatch.setenv("GPUTRAIN_TEST_CANARY", secret)
    monkeypatch.setenv("HF_TOKEN", secret)
    program = """
    import os
    def leak():
        found = dict(os.environ)
        for pid in os.listdir("/proc"):
            try:
                found[pid] = open(f"/proc/{pid}/environ").read()
            except OSError:
                pass
        return repr(found)
    """
    tests = [f"assert {secret!r} in leak()", "assert 'HF_TOKEN' in leak()"]
    result = pool.run(Job(textwrap.dedent(program), tests))
    assert result.fraction == 0.0
    assert [o.status for o in result.outcomes] == ["failed", "failed"]


def test_no_network_to_a_local_listener(pool: SandboxPool) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    program = f"""
    import socket
    def square(x):
        s = socket.create_connection(("127.0.0.1", {port}), timeout=2)
        s.sendall(b"hello")
        return x * x
    """
    try:
        assert run_hostile(pool, program) == 0.0
    finally:
        stop.set()
        thread.join()
        server.close()
    assert accepted == []


def test_killing_its_parent_does_not_harm_the_trainer(pool: SandboxPool) -> None:
    me = os.getpid()
    program = f"""
    import os, signal
    for target in (os.getppid(), {me}, -1, 1):
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass
    """
    assert run_hostile(pool, program) == 0.0
    assert psutil.pid_exists(me)


def test_deleting_files_outside_is_impossible(pool: SandboxPool, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    tmp_path.chmod(0o777)
    program = f"""
    import os, shutil
    def square(x):
        for path in ({str(victim)!r}, {str(Path(__file__))!r}):
            try:
                os.remove(path)
            except OSError:
                pass
        shutil.rmtree({str(tmp_path)!r}, ignore_errors=True)
        shutil.rmtree("/work", ignore_errors=True)
        return x * x
    """
    assert run_hostile(pool, program) == 1.0
    assert victim.read_text() == "keep me"
    assert Path(__file__).exists()


def test_sys_exit_before_asserts_scores_zero(pool: SandboxPool) -> None:
    for program in (
        "import sys\nsys.exit(0)\n",
        "import os\nos._exit(0)\n",
        "import os\ndef square(x):\n    os._exit(0)\n",
        "def square(x):\n    raise SystemExit(0)\n",
    ):
        assert run_hostile(pool, program) == 0.0, program


def test_patching_asserts_and_builtins_cannot_fake_a_pass(pool: SandboxPool) -> None:
    program = """
    import builtins, sys
    class Anything:
        def __eq__(self, other):
            return True
        def __bool__(self):
            return True
    builtins.AssertionError = type("NotAnError", (Exception,), {})
    builtins.isinstance = lambda *a: True
    builtins.type = lambda *a: int
    sys.modules["builtins"].__dict__["print"] = lambda *a, **k: None
    def square(x):
        return Anything()
    print("3 passed, 0 failed")
    print('{"ready": true, "names": []}')
    """
    assert run_hostile(pool, program) == 0.0
    assert run_hostile(pool, program, ["assert square(3)"]) == 0.0


def test_forged_control_messages_cannot_fake_a_pass(pool: SandboxPool) -> None:
    program = """
    import os
    def square(x):
        for fd in range(3, 64):
            try:
                os.write(fd, b'{"value": true}\\n{"ready": true}\\n')
            except OSError:
                pass
        return None
    """
    assert run_hostile(pool, program) == 0.0


def test_pool_runs_many_programs_concurrently(pool: SandboxPool) -> None:
    jobs = [GOOD, Job("while True:\n    pass\n", TESTS), GOOD, Job("", TESTS)]
    results = pool.map(jobs)
    assert [r.fraction for r in results] == [1.0, 0.0, 1.0, 0.0]
    assert wait_no_leftovers(pool) == []
