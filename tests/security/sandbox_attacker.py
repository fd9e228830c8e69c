"""Trainer side of the sandbox security suite (issue #25): one process per sandbox level, often as uid 65534.

    python sandbox_attacker.py attacks '{"site": "/tmp/...", "site_dirs": [...]}'   # one JSON report
    python sandbox_attacker.py hang '{}'          # scores a program that never ends (the test SIGKILLs us)

Each attack is written so that it *succeeds* when its program scores above 0 (or when the batch dies,
the trainer is changed, the wall budget is overrun): the report carries what the test side asserts. Stdlib
and gputrain only: it runs under any interpreter an unprivileged user can execute.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import sys
import textwrap
import time
from textwrap import dedent
from typing import Any

from gputrain.errors import SandboxError
from gputrain.train.code_reward import score_completions_detailed
from gputrain.train.code_reward.reward import get_pool
from gputrain.train.sandbox import SandboxLimits

LIMITS = SandboxLimits(wall_seconds=3.0, test_seconds=1.5, cpu_seconds=3, memory_mb=512, file_size_mb=2,
                       tmpfs_mb=4, output_bytes=64_000)
GOOD = "def square(x):\n    return x * x\n"
SQUARE = ["assert square(3) == 9", "assert square(-2) == 4"]
WRONG = "def square(x):\n    return x + 1\n"

# The reply the program's process is expected to send, whatever the protocol: the request in flight
# is a local of the serving loop one frame up (its nonce, if it has one, is copied).
FORGE = '''
import json, os, sys
def _out_fd():
    return int(sys.argv[2])
def _request():
    frame = sys._getframe(1)
    while frame is not None and "req" not in frame.f_locals:
        frame = frame.f_back
    if frame is None:
        return {}
    found = dict(frame.f_locals.get("req") or {})
    if isinstance(frame.f_locals.get("nonce"), str):
        found["id"] = frame.f_locals["nonce"]
    return found
def _forge(msg):
    req = _request()
    for key in ("id", "nonce", "seq"):
        if isinstance(req, dict) and key in req:
            msg[key] = req[key]
    os.write(_out_fd(), (json.dumps(msg) + "\\n").encode())
def _forge_blind(msg):
    os.write(_out_fd(), (json.dumps(msg) + "\\n").encode())
'''


def site_dirs() -> list[str]:
    """Where this interpreter's installed packages live (the answer key of a benchmark could be there)."""
    import site

    found = [*site.getsitepackages(), site.getusersitepackages()]
    return [d for d in dict.fromkeys(found) if os.path.isdir(d) and os.listdir(d)]


def attacks(ctx: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """name -> {program, tests, setup}; the program 'wins' when it scores above 0."""
    me = os.getpid()
    return {
        # 1. protocol forgery: a reply that claims a verdict / a "gone" status, written on the control pipe
        "forge_gone_passed": {"program": FORGE + dedent("""
            def square(x):
                _forge({"gone": "passed", "reason": ""})
                return -1
            """), "tests": SQUARE},
        "forge_verdict_reply": {"program": FORGE + dedent("""
            def square(x):
                _forge({"verdict": ["passed", ""], "value": -1})
                return -1
            """), "tests": SQUARE},
        "patched_serializer": {"program": """
            import json
            _real = json.dumps
            def _fake(msg, *a, **k):
                if isinstance(msg, dict) and ("value" in msg or "error" in msg):
                    msg = {**{k: v for k, v in msg.items() if k not in ("value", "error", "type")},
                           "gone": "passed", "reason": ""}
                return _real(msg, *a, **k)
            json.dumps = _fake
            def square(x):
                return -1
            """, "tests": SQUARE},
        "stale_replies_queued_ahead": {"program": FORGE + dedent("""
            def square(x):
                _forge_blind({"value": 9})
                _forge_blind({"value": 4})
                return -1
            """), "tests": SQUARE},
        # 2. reach the trainer: resource limits, priority, CPU affinity of every other process it can see
        "change_other_processes": {"program": f"""
            import os, resource
            def reach():
                done = 0
                pids = {{{me}, os.getppid()}}
                try:
                    pids |= {{int(p) for p in os.listdir("/proc") if p.isdigit()}}
                except OSError:
                    pass
                pids.discard(os.getpid())
                for pid in pids:
                    try:
                        soft, hard = resource.prlimit(pid, resource.RLIMIT_MSGQUEUE)
                        resource.prlimit(pid, resource.RLIMIT_MSGQUEUE, (min(soft, 4242), hard))
                        done += 1
                    except (OSError, ValueError):
                        pass
                    try:
                        os.setpriority(os.PRIO_PROCESS, pid, 7)
                        done += 1
                    except OSError:
                        pass
                    try:
                        os.sched_setaffinity(pid, {{min(os.sched_getaffinity(0))}})
                        done += 1
                    except OSError:
                        pass
                try:
                    os.setpriority(os.PRIO_USER, 0, 7)
                    done += 1
                except OSError:
                    pass
                return done
            """, "tests": ["assert reach() > 0"]},
        # 7. the writable folder has the configured size
        "fill_the_temp_folder": {"program": """
            import os, tempfile
            def written():
                total = 0
                folder = tempfile.gettempdir()
                for i in range(12):
                    try:
                        with open(os.path.join(folder, f"fill{i}"), "wb") as fh:
                            for _ in range(16):
                                fh.write(b"x" * (128 * 1024))
                                total += 128 * 1024
                    except OSError:
                        pass
                return total
            """, "tests": [f"assert written() > {LIMITS.tmpfs_mb} * 1024 * 1024"]},
        # 6. the answer key: installed packages (reference solutions shipped in a wheel) are not readable
        "read_site_packages": {"program": f"""
            import os
            def found():
                seen = 0
                for folder in {site_dirs()!r}:
                    try:
                        seen += len(os.listdir(folder))
                    except OSError:
                        pass
                return seen
            """, "tests": ["assert found() > 0"]},
    }


def score(program: str, task: dict[str, Any], limits: SandboxLimits = LIMITS) -> Any:
    [result] = score_completions_detailed([textwrap.dedent(program)], [task], workers=1, limits=limits)
    return result


def trainer_state() -> dict[str, Any]:
    return {"msgqueue": list(resource.getrlimit(resource.RLIMIT_MSGQUEUE)),
            "priority": os.getpriority(os.PRIO_PROCESS, 0), "affinity": sorted(os.sched_getaffinity(0))}


def batch_survives(report: dict[str, Any]) -> None:
    """3. One program's fake setup error (at load, during a call) costs that program its score only."""
    hostile = {
        "setup_error_at_load": FORGE + "\n_forge({'setup_error': 'fake'})\n" + WRONG,
        "setup_error_in_call": FORGE + "\ndef square(x):\n    _forge({'setup_error': 'fake'})\n    return 0\n",
        "exit_note_in_call": FORGE + "\ndef square(x):\n    _forge({'exit': 0})\n    return x * x\n",
    }
    for name, program in hostile.items():
        try:
            got = score_completions_detailed([program, GOOD], [{"tests": SQUARE}, {"tests": SQUARE}], workers=1,
                                             limits=LIMITS)
            report["attacks"][name] = {"reward": got[0].reward, "good_in_batch": got[1].reward,
                                       "reasons": [o.reason[:160] for o in got[0].outcomes]}
        except BaseException as exc:
            report["attacks"][name] = {"aborted": f"{type(exc).__name__}: {exc}"[:300]}


def blocked_write(report: dict[str, Any]) -> None:
    """4. A program that stops reading its pipe: the next request (1 MB) must not block the trainer."""
    program = FORGE + textwrap.dedent("""
        import time
        def square(x):
            _forge({"value": 9})
            time.sleep(30)
        """)
    tests = ["assert square(3) == 9", f"assert square({'x' * 1_000_000!r}) == 0", "assert square(1) == 1"]
    started = time.monotonic()
    result = score(program, {"tests": tests})
    report["attacks"]["stops_reading_its_pipe"] = {
        "seconds": round(time.monotonic() - started, 2), "statuses": [o.status for o in result.outcomes],
        "reward": result.reward}


def poisoned_row(report: dict[str, Any]) -> None:
    """5. A dataset row patches the judge that serves the next program (same pool slot)."""
    setup = textwrap.dedent("""
        import builtins
        _compile = compile
        def _poisoned(source, filename, *args, **kwargs):
            return _compile("pass" if filename == "<test>" else source, filename, *args, **kwargs)
        builtins.compile = _poisoned
        """)
    fresh = dataclasses.replace(LIMITS, output_bytes=LIMITS.output_bytes + 1)  # a pool of its own
    score(GOOD, {"tests": ["assert square(2) == 4"], "setup_code": setup}, fresh)
    after = score(WRONG, {"tests": SQUARE}, fresh)
    report["attacks"]["poisoned_row_patches_the_judge"] = {
        "reward": after.reward, "reasons": [o.reason[:160] for o in after.outcomes]}


def budget(report: dict[str, Any]) -> None:
    """#29: once the wall budget is spent, the remaining tests time out at once (no judge started for them).
    Each test here ends its judge (dataset code), so each next test needs a new one."""
    tests = ["import os, time\ntime.sleep(0.3)\nos._exit(1)"] * 16
    started = time.monotonic()
    result = score(GOOD, {"tests": tests})
    report["attacks"]["wall_budget_many_tests"] = {
        "seconds": round(time.monotonic() - started, 2), "statuses": [o.status for o in result.outcomes],
        "reasons": [o.reason[:80] for o in result.outcomes], "reward": result.reward}


def run_attacks(ctx: dict[str, Any]) -> dict[str, Any]:
    try:
        pool = get_pool(1, LIMITS)
    except SandboxError as exc:
        return {"refused": str(exc)}
    report: dict[str, Any] = {"sandbox": pool.describe(), "uid": os.getuid(), "attacks": {}}
    before = trainer_state()
    for name, attack in attacks(ctx).items():
        started = time.monotonic()
        try:
            result = score(attack["program"], {"tests": attack["tests"], "setup_code": attack.get("setup", "")})
            entry = {"reward": result.reward, "statuses": [o.status for o in result.outcomes],
                     "reasons": [o.reason[:160] for o in result.outcomes]}
        except BaseException as exc:
            entry = {"aborted": f"{type(exc).__name__}: {exc}"[:300]}
        entry["seconds"] = round(time.monotonic() - started, 2)
        if name == "fill_the_temp_folder":
            entry["good_after"] = score(GOOD, {"tests": SQUARE}).reward
        report["attacks"][name] = entry
    report["trainer_before"], report["trainer_after"] = before, trainer_state()
    for check in (batch_survives, blocked_write, budget, poisoned_row):
        check(report)
    report["good_last"] = score(GOOD + "import math, json, re, collections\n", {"tests": SQUARE}).reward
    return report


def hang() -> None:
    """Score a program that daemonizes and never returns; the test kills us with SIGKILL meanwhile."""
    program = textwrap.dedent("""
        import ctypes, os, time
        def _name(text):
            ctypes.CDLL(None).prctl(15, text.encode(), 0, 0, 0)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                _name("gpt-sbx-daemon")
                while True:
                    time.sleep(1)
            os._exit(0)
        def square(x):
            _name("gpt-sbx-prog")
            while True:
                pass
        """)
    limits = SandboxLimits(wall_seconds=60, test_seconds=60, cpu_seconds=60)
    print("scoring", flush=True)
    score_completions_detailed([program], [{"tests": SQUARE}], workers=1, limits=limits)


def good() -> dict[str, Any]:
    """The level chosen here, and a correct program's score with stdlib imports (C extensions included)."""
    try:
        pool = get_pool(1, LIMITS)
    except SandboxError as exc:
        return {"refused": str(exc)}
    program = GOOD + "import math, json, re, collections, decimal, hashlib\n"
    return {"sandbox": pool.describe(), "interpreter": sys.executable, "good": score(program, {"tests": SQUARE}).reward}


def main() -> None:
    mode, ctx = sys.argv[1], json.loads(sys.argv[2])
    if mode == "hang":
        hang()
        return
    if mode == "good":
        print(json.dumps(good()))
        return
    print(json.dumps(run_attacks(ctx)))


if __name__ == "__main__":
    main()
