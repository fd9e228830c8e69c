"""Child side of the sandbox: confine, fork a supervisor, then serve the program or the judge.

The trainer starts ``python -I -S -c <bootstrap>`` (see ``process.py``), which loads this file and its
stdlib-only siblings from source (site-packages and the project are invisible inside). It reads its
settings from the control pipe, confines itself (``confine.py``), forks: the parent stays behind as the
supervisor (the PID namespace's init, or a child subreaper that adopts double-forked orphans), the child
runs in its own process group as one of two roles:

- ``program``: runs the untrusted program once, then answers call requests (``{"name"|"method", args}``)
  with plain data. It never sees a test or a verdict.
- ``judge``: runs the dataset's setup code, prelude and tests (``verdict.py``); each call of a program
  function goes out on the pipe and its answer comes back through the trainer.

Whatever the program patches here (builtins, ``AssertionError``, ``sys.exit``, fake output), it can only
influence what its functions return, never the verdict.
"""

from __future__ import annotations

import builtins
import os
import select
import sys

TYPE_CHECKING = False  # not ``typing.TYPE_CHECKING``: importing typing costs every sandbox start ~4 ms
if TYPE_CHECKING:
    from typing import Any

try:
    from gputrain.train.sandbox import confine, wire
    from gputrain.train.sandbox.codec import decode, encode
except ImportError:  # inside the sandbox: the bootstrap registered the siblings under these names
    import _gputrain_sbx_confine as confine  # type: ignore[no-redef]
    import _gputrain_sbx_wire as wire  # type: ignore[no-redef]
    from _gputrain_sbx_codec import decode, encode  # type: ignore[no-redef]

NAMESPACE_LEVELS = ("namespaces", "userns")
#: The same number on every Linux architecture; the ``signal`` module's enums cost each start ~10 %.
SIGKILL = 9


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 300 else text[:300] + "..."


def _flush() -> None:
    for stream in (sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            pass


def _sender(out_fd: int) -> Any:
    write = os.write

    def send(msg: dict[str, Any]) -> None:
        data = (wire.dumps(msg) + "\n").encode()
        while data:
            data = data[write(out_fd, data):]

    return send


def serve_program(cfg: dict[str, Any], rin: Any, out_fd: int) -> None:
    send = _sender(out_fd)
    handles: dict[int, Any] = {}

    def opaque(value: Any) -> Any:
        handles[len(handles)] = value
        return {"h": [len(handles) - 1, type(value).__name__]}

    namespace: dict[str, Any] = {"__name__": "__sandbox__", "__builtins__": builtins}

    def resolve(tag: str, body: Any) -> Any:
        return namespace[body] if tag == "r" else handles[body[0]]

    try:
        exec(compile(cfg["setup"], "<setup>", "exec"), namespace)
        exec(compile(cfg["program"], "<program>", "exec"), namespace)
    except BaseException as exc:
        send({"ready": False, "error": _describe(exc)})
        return
    _flush()
    names = sorted(k for k, v in namespace.items() if callable(v) and not k.startswith("__"))
    send({"ready": True, "names": names})
    for line in rin:
        req = wire.loads(line)
        nonce = req.pop("id", None)
        try:
            method = req.get("method")
            target = getattr(handles[req["handle"]], method) if method else namespace[req["name"]]
            args = decode(req["args"], resolve)
            kwargs = decode(req["kwargs"], resolve)
            result = target(*args, **kwargs)
            reply = {"value": encode(result, opaque)}
        except BaseException as exc:
            reply = {"error": _describe(exc), "type": type(exc).__name__}
        _flush()
        send({**reply, "id": nonce})


def serve_judge(cfg: dict[str, Any], rin: Any, out_fd: int) -> None:
    # Only the judge's bootstrap loads verdict.py (registered under this name before any code of the
    # dataset's ran); outside a sandbox it is the package's module.
    try:
        import _gputrain_sbx_verdict as verdict
    except ImportError:
        from gputrain.train.sandbox import verdict
    send = _sender(out_fd)

    def link(request: dict[str, Any]) -> dict[str, Any]:
        send({"call": request})
        line = rin.readline()
        if not line:
            raise verdict.ProgramGone("crashed", "the trainer closed the judge")
        reply = wire.loads(line)
        return reply if isinstance(reply, dict) else {"gone": "crashed", "reason": "garbled relay"}

    send({"ready": True})
    for line in rin:
        req = wire.loads(line)
        status, reason = verdict.run_test(req["test"], link, req["names"], req.get("setup", cfg["setup"]),
                                          req.get("prelude", cfg["prelude"]), req.get("entry", ""))
        _flush()
        send({"verdict": [status, reason]})


def children_of(parent: int) -> list[int]:
    """Processes whose parent is ``parent`` (from /proc; the supervisor runs outside the confinement)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 1 and int(fields[1]) == parent:
                found.append(int(entry))
    return found


def reap_orphans() -> None:
    """Without a PID namespace, the program's orphans (a double-forked daemon) were re-parented to us,
    the child subreaper: kill them, reap them, and repeat until none is left."""
    import time

    me = os.getpid()
    for _ in range(2000):
        kids = children_of(me)
        if not kids:
            return
        for pid in kids:
            try:
                os.kill(pid, SIGKILL)
            except OSError:
                pass
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.005)
                break


def supervise(cfg: dict[str, Any], child: int, in_fd: int, out_fd: int) -> None:
    """The parent after the fork: wait for the worker, report how it ended, then let nothing outlive it.

    It also ends the worker (and, being the PID namespace's init or the child subreaper, everything the
    worker started) when the trainer is gone: the trainer holds the only write end of ``in_fd``, so a
    hang-up there means it died, even by SIGKILL. At the Landlock level (no tmpfs) it enforces the
    writable folder's size: every write there wakes it, and going over ``tmpfs_mb`` kills the worker."""
    if cfg["level"] in NAMESPACE_LEVELS:
        confine.drop(cfg)
    try:
        pidfd = os.pidfd_open(child)
    except (AttributeError, OSError):  # kernel < 5.3: look every 50 ms instead
        pidfd = -1
    poller = select.poll()
    if pidfd >= 0:
        poller.register(pidfd, select.POLLIN)
    poller.register(in_fd, 0)  # only POLLHUP/POLLERR: the worker reads the requests, not us
    watch = confine.watch_folder(cfg["writable"]) if cfg["level"] == "landlock" else -1
    if watch >= 0:
        poller.register(watch, select.POLLIN)
    limit = cfg["tmpfs_mb"] * 1024 * 1024
    why = ""
    while not why:
        events = dict(poller.poll(None if pidfd >= 0 else 50))
        if pidfd in events or (pidfd < 0 and os.waitid(os.P_PID, child, os.WEXITED | os.WNOHANG | os.WNOWAIT)):
            break
        if in_fd in events:
            why = "trainer gone"
        elif watch in events:
            try:
                while os.read(watch, 65536):
                    pass
            except BlockingIOError:
                pass
            if confine.folder_bytes(cfg["writable"]) > limit:
                why = f"temp folder over {cfg['tmpfs_mb']} MB"
    if why:
        for kill in (os.killpg, os.kill):
            try:
                kill(child, SIGKILL)
            except OSError:
                pass
    _, status = os.waitpid(child, 0)
    note = wire.dumps({"exit": os.waitstatus_to_exitcode(status), **({"why": why} if why else {})}) + "\n"
    try:
        os.write(out_fd, note.encode())
    except OSError:
        pass
    if cfg["level"] not in NAMESPACE_LEVELS:
        reap_orphans()
    os._exit(0)


def main() -> None:
    in_fd, out_fd = int(sys.argv[1]), int(sys.argv[2])
    rin = os.fdopen(in_fd, "r", encoding="utf-8")
    cfg = wire.loads(rin.readline())
    send = _sender(out_fd)
    try:
        confine.preload(cfg)
        if cfg["level"] in NAMESPACE_LEVELS:
            confine.build_root(cfg)
        elif "landlock" in cfg["layers"]:
            confine.become_reaper()
    except Exception as exc:
        send({"setup_error": _describe(exc)})
        os._exit(0)
    pid = os.fork()
    if pid:
        supervise(cfg, pid, in_fd, out_fd)
    os.setpgid(0, 0)  # its own group: kill(0, ...) from the program never reaches the supervisor
    os.chdir(cfg["workdir"])
    try:
        confine.confine_program(cfg)
    except Exception as exc:
        send({"setup_error": _describe(exc)})
        os._exit(0)
    # From here on untrusted code runs: the trainer believes no setup error after this line.
    send({"confined": True})
    if cfg["mode"] == "judge":
        serve_judge(cfg, rin, out_fd)
    else:
        serve_program(cfg, rin, out_fd)
    os._exit(0)


if __name__ == "__main__":
    main()
