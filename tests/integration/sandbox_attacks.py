"""The trainer side of the hostile-program suite, run as its own process (often as an unprivileged uid).

    python sandbox_attacks.py '{"port": 4242, "home": ..., "job_dir": ..., "token": ...}'

It scores each attack through the real reward path (``score_completions_detailed``), checks that nothing
the attack started is still alive, scores a good program after each one (the sandbox still works) and
prints one JSON object: the isolation level, and per attack the reward, statuses, reasons, seconds and
leftover processes. Each attack is written so that its test passes *only if the attack worked*: a score
of 0 means contained. Side effects outside (files, connections, shared memory, a dead trainer) are
checked by ``test_sandbox_hostile.py``, which also plants the canaries. Stdlib and gputrain only: it
must run under any interpreter an unprivileged user can execute.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from typing import Any

from gputrain.errors import SandboxError
from gputrain.train.code_reward import score_completions_detailed
from gputrain.train.code_reward.reward import get_pool
from gputrain.train.sandbox import SandboxLimits

try:
    from gputrain.train.sandbox.process import descendants
except ImportError:  # an older gputrain (the suite is also run against it to show what it let through)
    def descendants(root: int) -> list[int]:
        return []

LIMITS = SandboxLimits(wall_seconds=4.0, test_seconds=2.0, cpu_seconds=3, memory_mb=512, output_bytes=64_000)
SECRETS = ("WANDB_API_KEY", "HF_TOKEN", "RUNPOD_API_KEY")
GOOD = "def square(x):\n    return x * x\n"
SQUARE_TESTS = ["assert square(3) == 9", "assert square(-2) == 4"]


def attacks(ctx: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """name -> {program, tests, setup}. A test passes only when the attack succeeded."""
    secrets = [os.environ[name] for name in SECRETS]
    me, home, job, token = os.getpid(), ctx["home"], ctx["job_dir"], ctx["token"]
    key_text, job_text = ctx["ssh_key_text"], ctx["job_text"]
    targets = [f"{job}/pwned", f"{home}/pwned", f"/tmp/{token}-pwned", f"{os.path.dirname(job)}/pwned"]
    found_secret = " or ".join(f"{s!r} in leak()" for s in secrets)
    return {
        "environment_secrets": {"program": """
            import os
            def leak():
                return repr(dict(os.environ))
            """, "tests": [f"assert {s!r} in leak()" for s in secrets]},
        "proc_environ_of_trainer": {"program": f"""
            import os
            def leak():
                found = []
                for pid in [str(os.getppid()), "{me}", *os.listdir("/proc")]:
                    for name in ("environ", "cmdline", "mem"):
                        try:
                            with open(f"/proc/{{pid}}/{{name}}", "rb") as fh:
                                found.append(fh.read(1 << 16).decode("latin-1"))
                        except OSError:
                            pass
                return "".join(found)
            """, "tests": [f"assert {found_secret}"]},
        "ssh_private_key": {"program": f"""
            def leak():
                with open({home + '/.ssh/id_ed25519'!r}) as fh:
                    return fh.read()
            """, "tests": [f"assert {key_text!r} in leak()"]},
        "read_job_folder": {"program": f"""
            import os
            def leak():
                out = []
                for root, _, files in os.walk({job!r}):
                    for name in files:
                        out.append(open(os.path.join(root, name)).read())
                return "".join(out)
            """, "tests": [f"assert {job_text!r} in leak()"]},
        "read_etc_shadow": {"program": """
            def leak():
                return open("/etc/shadow").read()
            """, "tests": ["assert 'root:' in leak()"]},
        "write_outside": {"program": f"""
            def wrote():
                done = 0
                for path in {targets!r}:
                    try:
                        with open(path, "w") as fh:
                            fh.write("pwned")
                        # the sandbox's own /tmp is private and writable: only the host's counts
                        done += not path.startswith("/tmp/")
                    except OSError:
                        pass
                return done
            """, "tests": ["assert wrote() > 0"]},
        "network_to_local_canary": {"program": f"""
            import socket
            def reach():
                with socket.create_connection(("127.0.0.1", {ctx['port']}), timeout=1.5) as s:
                    s.sendall(b"{token}")
                return "reached"
            """, "tests": ["assert reach() == 'reached'"]},
        "kill_the_trainer": {"program": f"""
            import os, signal
            def kill():
                done = 0
                for target in (os.getppid(), {me}):
                    try:
                        os.kill(target, signal.SIGKILL)
                        done += 1
                    except OSError:
                        pass
                try:  # returns 0 even when every signal was refused: its effect is the trainer's death
                    os.kill(-1, signal.SIGKILL)
                except OSError:
                    pass
                return done
            """, "tests": ["assert kill() > 0"]},
        "fork_bomb": {"program": """
            import os
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
            """, "tests": SQUARE_TESTS},
        # bytes(n) is calloc'd: address space without touching pages, so the memory limit (address space)
        # answers in milliseconds however loaded the machine is; without the limit the loop runs until the
        # test's time-out and the "MemoryError" check fails (zero-filled bytearrays took over 2 s at load 10)
        "memory_hog": {"program": """
            chunks = []
            def square(x):
                while True:
                    chunks.append(bytes(64 * 1024 * 1024))
            """, "tests": SQUARE_TESTS},
        "daemon_holding_the_pipes": {"program": """
            import os, time
            def square(x):
                if os.fork() == 0:
                    os.setsid()
                    if os.fork() == 0:
                        time.sleep(3600)
                    os._exit(0)
                time.sleep(3600)
            """, "tests": SQUARE_TESTS},
        "sysv_shared_memory": {"program": f"""
            import ctypes
            def attach():
                libc = ctypes.CDLL(None, use_errno=True)
                return libc.shmget({ctx['shm_key']}, 4096, 0o1000 | 0o666)
            """, "tests": ["assert attach() >= 0"]},
        "output_flood": {"program": """
            while True:
                print("x" * 10000)
            """, "tests": SQUARE_TESTS},
        "exit_and_patched_builtins": {"program": """
            import builtins, sys
            class Anything:
                def __eq__(self, other):
                    return True
            builtins.AssertionError = type("NotAnError", (Exception,), {})
            def square(x):
                return Anything()
            print('{"verdict": ["passed", ""]}')
            sys.stdout.flush()
            """, "tests": SQUARE_TESTS},
        "override_a_setup_helper": {"program": """
            def expected(x):
                return 0
            def square(x):
                return 0
            """, "tests": ["assert square(3) == expected(3)"], "setup": "def expected(x):\n    return x * x\n"},
        "stop_iteration_through_map": {"program": """
            def square(x):
                raise StopIteration
            """, "tests": ["assert all(map(lambda x: square(x) == x * x, [1, 2, 3]))"]},
        "dataset_code_is_sandboxed_too": {"program": GOOD, "setup": textwrap.dedent(f"""
            import os
            for path in {targets!r}:
                try:
                    open(path, "w").write("pwned by the dataset")
                except OSError:
                    pass
            """), "tests": [f"import os\nassert {secrets[0]!r} in repr(dict(os.environ))",
                            f"assert {key_text!r} in open({home + '/.ssh/id_ed25519'!r}).read()"]},
    }


def leftovers(pool_uids: tuple[int, ...], kept: list[int]) -> list[int]:
    """Live processes this run started and that should be gone: below us, or of the sandbox's uids
    (the pool's kept judge processes, which run only dataset code, excepted)."""
    me = os.getpid()
    uids = set(pool_uids) | ({os.getuid()} if os.getuid() != 0 else set())
    found = set(descendants(me))
    spared = set(kept) | {pid for k in kept for pid in descendants(k)}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/status") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
        except OSError:
            continue
        if int(fields["Uid"].split()[0]) in uids:
            found.add(int(entry))
    alive = []
    for pid in found - spared:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0] != b"Z":
                    alive.append(pid)
        except OSError:
            pass
    return sorted(alive)


def settle(pool: Any) -> list[int]:
    """The kernel kills a dead namespace's processes asynchronously: poll a little (not a timing test)."""
    kept = getattr(pool, "judge_pids", list)()
    for _ in range(100):
        left = leftovers(pool.uids, kept)
        if not left:
            return []
        time.sleep(0.05)
    return leftovers(pool.uids, kept)


def main() -> None:
    ctx = json.loads(sys.argv[1])
    try:
        pool = get_pool(1, LIMITS)
    except SandboxError as exc:
        print(json.dumps({"refused": str(exc)}))
        return
    describe = getattr(pool, "describe", None)
    sandbox = describe() if describe else {"level": pool.level, "layers": [], "strong": pool.level == "namespaces"}
    report: dict[str, Any] = {"sandbox": sandbox, "uid": os.getuid(), "attacks": {}}
    only = set(ctx.get("only") or [])
    for name, attack in attacks(ctx).items():
        if only and name not in only:
            continue
        task = {"task_id": name, "tests": attack["tests"], "setup_code": attack.get("setup", "")}
        started = time.monotonic()
        [score] = score_completions_detailed([textwrap.dedent(attack["program"])], [task], workers=1,
                                             limits=LIMITS)
        seconds = time.monotonic() - started
        left = settle(pool)
        [good] = score_completions_detailed([GOOD], [{"task_id": "good", "tests": SQUARE_TESTS}], workers=1,
                                            limits=LIMITS)
        report["attacks"][name] = {
            "reward": score.reward, "statuses": [o.status for o in score.outcomes],
            "reasons": [o.reason[:160] for o in score.outcomes], "seconds": round(seconds, 2),
            "leftovers": left, "good_after": good.reward,
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
