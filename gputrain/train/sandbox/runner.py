"""Child side of the sandbox, and the plain-data codec both sides share.

The parent starts this file's source with ``python -I -S -c`` inside fresh mount/PID/network namespaces
(``unshare``). It hides the host's private folders, forks a tiny init that holds the namespace, drops to an
unprivileged uid, sets resource limits, runs the untrusted program once, then answers call requests on a
control pipe. The tests themselves never enter this process: the parent evaluates each assert and only
asks "call f with these arguments". Whatever the program patches here (builtins, ``AssertionError``,
``sys.exit``, fake output), it can only influence what its functions return, never the verdict.

Self-contained on purpose (stdlib only, no package imports): site-packages is hidden from the child.
"""

from __future__ import annotations

import builtins
import json
import os
import sys
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 64

_SCALARS = (type(None), bool, int, float, str)


def encode(value: Any, opaque: Callable[[Any], Any], depth: int = 0) -> Any:
    """Turn plain data into tagged JSON; anything else goes through ``opaque``."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if type(value) in _SCALARS:
        return value
    d = depth + 1
    if isinstance(value, list):
        return {"l": [encode(v, opaque, d) for v in value]}
    if isinstance(value, tuple):
        return {"t": [encode(v, opaque, d) for v in value]}
    if isinstance(value, frozenset):
        return {"fs": [encode(v, opaque, d) for v in value]}
    if isinstance(value, set):
        return {"s": [encode(v, opaque, d) for v in value]}
    if isinstance(value, dict):
        return {"d": [[encode(k, opaque, d), encode(v, opaque, d)] for k, v in value.items()]}
    if isinstance(value, bytes | bytearray):
        return {"b": bytes(value).hex()}
    if isinstance(value, complex):
        return {"c": [value.real, value.imag]}
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return opaque(value)


def decode(obj: Any, resolve: Callable[[str, Any], Any], depth: int = 0) -> Any:
    """Rebuild plain data from tagged JSON; only builtin types come out (tags ``r``/``h`` via resolve)."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if type(obj) is not dict or len(obj) != 1:
        raise ValueError(f"malformed value {type(obj).__name__}")
    ((tag, body),) = obj.items()
    d = depth + 1
    if tag in ("l", "t", "s", "fs"):
        if type(body) is not list:
            raise ValueError("malformed sequence")
        items = [decode(v, resolve, d) for v in body]
        return {"l": list, "t": tuple, "s": set, "fs": frozenset}[tag](items)
    if tag == "d":
        if type(body) is not list or any(type(p) is not list or len(p) != 2 for p in body):
            raise ValueError("malformed dict")
        return {decode(k, resolve, d): decode(v, resolve, d) for k, v in body}
    if tag == "b" and type(body) is str:
        return bytes.fromhex(body)
    if tag == "c" and type(body) is list and len(body) == 2:
        return complex(float(body[0]), float(body[1]))
    if tag in ("r", "h"):
        return resolve(tag, body)
    raise ValueError(f"unknown tag {tag!r}")


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 300 else text[:300] + "..."


def _mount(libc: Any, src: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    import ctypes

    rc = libc.mount(
        src.encode(), target.encode(), fstype.encode() if fstype else None, ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _setup_mounts(cfg: dict[str, Any]) -> None:
    """Cover private folders with empty tmpfs, re-expose the interpreter, give the program a fresh tmpfs."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    ms_rdonly, ms_nosuid, ms_nodev, ms_remount, ms_bind, ms_rec = 1, 2, 4, 32, 4096, 16384
    keep_fds = [(path, os.open(path, os.O_RDONLY | os.O_DIRECTORY)) for path in cfg["keep"]]
    for path in cfg["cover"]:
        if os.path.isdir(path):
            _mount(libc, "tmpfs", path, "tmpfs", ms_nosuid | ms_nodev, "size=64k,mode=0755")
    for path, fd in keep_fds:
        os.makedirs(path, exist_ok=True)
        _mount(libc, f"/proc/self/fd/{fd}", path, None, ms_bind | ms_rec, None)
        _mount(libc, "none", path, None, ms_remount | ms_bind | ms_rdonly, None)
        os.close(fd)
    for path in cfg["hide"]:
        if os.path.isdir(path):
            _mount(libc, "tmpfs", path, "tmpfs", ms_nosuid | ms_nodev, "size=64k,mode=0755")
    work = cfg["workdir"]
    os.makedirs(work, exist_ok=True)
    opts = f"size={cfg['tmpfs_mb']}m,mode=0700,uid={cfg['uid']},gid={cfg['gid']}"
    _mount(libc, "tmpfs", work, "tmpfs", ms_nosuid | ms_nodev, opts)


def _drop_and_limit(cfg: dict[str, Any]) -> None:
    import resource

    if cfg.get("uid") is not None:
        os.setgroups([])
        os.setgid(cfg["gid"])
        os.setuid(cfg["uid"])
    try:
        import ctypes

        ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: no setuid binaries regain root
    except (OSError, AttributeError):
        pass
    lim = cfg["limits"]
    mb = 1024 * 1024
    for res, value in (
        (resource.RLIMIT_CPU, lim["cpu_seconds"]),
        (resource.RLIMIT_AS, lim["memory_mb"] * mb),
        (resource.RLIMIT_FSIZE, lim["file_size_mb"] * mb),
        (resource.RLIMIT_NPROC, lim["max_processes"]),
        (resource.RLIMIT_NOFILE, 64),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(res, (value, value))


def _flush() -> None:
    for stream in (sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            pass


def _serve(cfg: dict[str, Any], rin: Any, out_fd: int) -> None:
    write = os.write

    def send(msg: dict[str, Any]) -> None:
        data = (json.dumps(msg) + "\n").encode()
        while data:
            data = data[write(out_fd, data):]

    handles: dict[int, Any] = {}

    def opaque(value: Any) -> Any:
        handles[len(handles)] = value
        return {"h": [len(handles) - 1, type(value).__name__]}

    namespace: dict[str, Any] = {"__name__": "__sandbox__", "__builtins__": builtins}

    def resolve(tag: str, body: Any) -> Any:
        return namespace[body] if tag == "r" else handles[body[0]]

    try:
        exec(compile(cfg["setup"] + "\n" + cfg["program"], "<program>", "exec"), namespace)
    except BaseException as exc:
        send({"ready": False, "error": _describe(exc)})
        return
    _flush()
    names = sorted(k for k, v in namespace.items() if callable(v) and not k.startswith("__"))
    send({"ready": True, "names": names})
    for line in rin:
        req = json.loads(line)
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
        send(reply)


def main() -> None:
    in_fd, out_fd = int(sys.argv[1]), int(sys.argv[2])
    rin = os.fdopen(in_fd, "r", encoding="utf-8")
    cfg = json.loads(rin.readline())
    if cfg["namespaces"]:
        _setup_mounts(cfg)
    pid = os.fork()
    if pid:
        # Init of the PID namespace: when it exits the kernel kills every process left inside.
        rin.close()
        _drop_and_limit(cfg)
        _, status = os.waitpid(pid, 0)
        note = json.dumps({"exit": os.waitstatus_to_exitcode(status)}) + "\n"
        try:
            os.write(out_fd, note.encode())
        except OSError:
            pass
        os._exit(0)
    os.chdir(cfg["workdir"])
    _drop_and_limit(cfg)
    _serve(cfg, rin, out_fd)
    os._exit(0)


if __name__ == "__main__":
    main()
