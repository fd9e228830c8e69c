"""Child side: confine this process before it runs model-written code (stdlib only, plus the bindings).

The trainer starts the child with ``python -I -S`` (no site-packages) and passes this file's source in, so
nothing here imports gputrain. What each layer does, in the order :func:`confine` applies them:

- ``build_root`` (namespace levels): a new root made of an empty tmpfs, with only the system folders, the
  interpreter and a few ``/dev`` nodes bind-mounted read-only, a private size-limited ``/tmp`` as the only
  writable place, then ``pivot_root`` and the old root detached. An allowlist: the job folder, homes,
  ``~/.ssh``, site-packages and the project simply do not exist inside.
- ``drop``: a dedicated uid (trainer is root), or, in an unprivileged user namespace, every capability
  dropped for good (bounding set emptied, securebits locked so an ``exec`` cannot regain them).
- ``limit``: rlimits (CPU, address space, file size, processes, open files, no core dumps).
- ``landlock`` (Landlock LSM, its three syscalls through ctypes): the same allowlist enforced by the kernel on paths,
  no TCP, and, with ABI >= 6, no signals to and no abstract sockets of processes outside the sandbox.
  Landlock also forbids ptrace of (and reading ``/proc/<pid>/environ`` of) any process outside it.
- ``seccomp`` (libseccomp through ctypes; the trainer locates it with ``pyseccomp``):
  no sockets at all, no ptrace or cross-process memory
  access, no SysV IPC, no io_uring, no keyrings, no mounts; without Landlock's signal scope, ``kill`` only
  to the program's own process group.
"""

from __future__ import annotations

import ctypes
import os
import resource

TYPE_CHECKING = False  # not ``typing.TYPE_CHECKING``: importing typing costs every sandbox start ~4 ms
if TYPE_CHECKING:
    from typing import Any

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18)
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS, PR_SET_SECUREBITS, PR_CAPBSET_DROP, PR_CAP_AMBIENT = 38, 28, 24, 47
PR_SET_CHILD_SUBREAPER, PR_SET_PDEATHSIG = 36, 1
SECURE_ALL_BITS_LOCKED = 0x3F  # NOROOT, NO_SETUID_FIXUP, KEEP_CAPS and their locks
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "riscv64": 41, "s390x": 217}
DEV_NODES = ("null", "zero", "full", "random", "urandom")
#: Syscalls refused with EPERM (the program sees an ordinary error, not a crash).
SECCOMP_DENY = (
    "socket", "socketpair", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    "shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop",
    "msgget", "msgsnd", "msgrcv", "msgctl", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "mount", "umount2", "pivot_root", "chroot", "setns", "move_mount", "open_tree", "fsopen", "fsmount",
    "fsconfig", "mount_setattr", "unshare", "reboot", "kexec_load", "init_module", "finit_module",
    "delete_module", "swapon", "swapoff", "acct", "quotactl", "syslog",
)
SIGNAL_SYSCALLS = ("tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_send_signal")
#: Syscalls that change *another* process given its pid as first argument: allowed on 0 (the caller) only,
#: so no level lets a program renice, re-limit or re-pin the trainer or a neighbour (with no PID
#: namespace, at the Landlock level, it could see and reach them).
OTHER_PROCESS_BY_PID = ("prlimit64", "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr",
                        "migrate_pages", "move_pages", "get_robust_list")
#: Whole syscalls with no use inside a sandbox that act on another process through a pidfd.
OTHER_PROCESS_BY_PIDFD = ("process_madvise", "process_mrelease")
PRIO_PROCESS, IOPRIO_WHO_PROCESS = 0, 1


class ConfineError(Exception):
    """A layer the trainer asked for could not be applied: the program must not run."""


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise ConfineError(f"{what}: {os.strerror(err)}")


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    rc = _libc().mount(
        src.encode() if src else None, target.encode(), fstype.encode() if fstype else None,
        ctypes.c_ulong(flags), data.encode() if data else None,
    )
    _check(rc, f"mount {target}")


def _kept_flags(path: str) -> int:
    """Flags of the mount under ``path`` that a user namespace may not clear when remounting read-only."""
    st = os.statvfs(path)
    out = 0
    for vfs, ms in ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
                    (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME),
                    (os.ST_RELATIME, MS_RELATIME)):
        if st.f_flag & vfs:
            out |= ms
    return out


def _bind(source: str, target: str, *, readonly: bool) -> None:
    _mount(source, target, None, MS_BIND | MS_REC)
    if readonly:
        _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | _kept_flags(target))


def _place(new_root: str, path: str) -> str:
    """Create the mount point for ``path`` inside the new root (a folder, or an empty file)."""
    target = new_root + path
    if os.path.isdir(path):
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        with open(target, "a"):
            pass
    return target


def build_root(cfg: dict[str, Any]) -> None:
    """Pivot into a root that holds only what ``cfg['read_only']`` lists, less ``cfg['hidden']`` (installed
    packages, covered by an empty read-only tmpfs), plus /dev nodes and a private size-limited /tmp.

    /tmp is mounted first and the read-only folders after it, so an interpreter that lives under /tmp is
    bound inside the new /tmp instead of being covered by it."""
    new_root = cfg["stage"]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    os.makedirs(new_root + "/tmp", mode=0o755)
    owner = f"uid={cfg['uid'] or 0},gid={cfg['gid'] or 0}"
    _mount("tmpfs", new_root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['tmpfs_mb']}m,mode=0700,{owner}")
    for path in cfg["read_only"]:
        if os.path.islink(path) and os.path.dirname(path) == "/":  # merged /usr: /bin -> usr/bin
            os.symlink(os.readlink(path), new_root + path)
        elif os.path.exists(path):
            _bind(path, _place(new_root, path), readonly=True)
    for path in cfg.get("hidden", []):
        if os.path.isdir(new_root + path):
            _mount("tmpfs", new_root + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555")
    os.makedirs(new_root + "/dev", mode=0o755)
    for name in DEV_NODES:
        if os.path.exists(f"/dev/{name}"):
            _bind(f"/dev/{name}", _place(new_root, f"/dev/{name}"), readonly=False)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{new_root}/dev/{name}")
    os.chdir(new_root)
    number = PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise ConfineError(f"pivot_root: unknown syscall number on {os.uname().machine}")
    _check(_libc().syscall(number, b".", b"."), "pivot_root")
    _check(_libc().umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")
    _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def drop(cfg: dict[str, Any]) -> None:
    """Give up privilege for good: a dedicated uid, or (user namespace) every capability."""
    libc = _libc()
    if cfg.get("uid") is not None and os.getuid() == 0 and cfg["level"] != "userns":
        os.setgroups([])
        os.setgid(cfg["gid"])
        os.setuid(cfg["uid"])
    elif cfg["level"] == "userns":
        _check(libc.prctl(PR_SET_SECUREBITS, SECURE_ALL_BITS_LOCKED, 0, 0, 0), "lock securebits")
        for cap in range(64):
            if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                break  # past the last capability this kernel knows
        libc.prctl(PR_CAP_AMBIENT, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)
        data = (ctypes.c_uint32 * 6)()
        _check(libc.capset(header, data), "drop capabilities")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def limit(cfg: dict[str, Any]) -> None:
    lim = cfg["limits"]
    mb = 1024 * 1024
    for res, value in (
        (resource.RLIMIT_CPU, lim["cpu_seconds"]),
        (resource.RLIMIT_AS, lim["memory_mb"] * mb),
        (resource.RLIMIT_FSIZE, min(lim["file_size_mb"], lim["tmpfs_mb"]) * mb),
        (resource.RLIMIT_NPROC, cfg["nproc"]),
        (resource.RLIMIT_NOFILE, 64),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(res, (value, value))


class _PathBeneath(ctypes.Structure):
    """``struct landlock_path_beneath_attr`` (packed)."""

    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


LL_CREATE, LL_ADD_RULE, LL_RESTRICT = 444, 445, 446  # the same number on every architecture
LL_EXECUTE, LL_WRITE_FILE, LL_READ_FILE, LL_READ_DIR, LL_REMOVE_FILE, LL_MAKE_REG, LL_TRUNCATE = (
    0x1, 0x2, 0x4, 0x8, 0x20, 0x100, 0x4000)
#: Filesystem rights each ABI knows (all of them handled: what is not allowed is denied), TCP bind/connect
#: from ABI 4, signal and abstract-socket scopes from ABI 6.
LL_FS = {1: 0x1FFF, 2: 0x3FFF, 3: 0x7FFF, 4: 0x7FFF, 5: 0xFFFF}
LL_SCOPE_ABSTRACT_UNIX, LL_SCOPE_SIGNAL = 1, 2


def landlock(cfg: dict[str, Any]) -> bool:
    """Apply the Landlock allowlist with the raw syscalls; True when signals are scoped too (ABI >= 6)."""
    libc = _libc()
    abi = libc.syscall(LL_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # LANDLOCK_CREATE_RULESET_VERSION
    if abi < 1:
        raise ConfineError("Landlock is not available")
    handled_fs = LL_FS[min(abi, 5)]
    attr = (ctypes.c_uint64 * 3)(handled_fs, 0x3 if abi >= 4 else 0,
                                 LL_SCOPE_ABSTRACT_UNIX | LL_SCOPE_SIGNAL if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(LL_CREATE, attr, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise ConfineError(f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")

    def allow(path: str, access: int) -> None:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            rule = _PathBeneath(access & handled_fs, fd)
            if libc.syscall(LL_ADD_RULE, ruleset, 1, ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                raise ConfineError(f"landlock rule {path}: {os.strerror(ctypes.get_errno())}")
        finally:
            os.close(fd)

    try:
        for path in cfg["read_only"]:
            if os.path.exists(path):
                allow(path, LL_READ_FILE | LL_EXECUTE | (LL_READ_DIR if os.path.isdir(path) else 0))
        for name in DEV_NODES:
            if os.path.exists(f"/dev/{name}"):
                allow(f"/dev/{name}", LL_READ_FILE | LL_WRITE_FILE)
        # A flat folder of regular files: the supervisor watches its size (no tmpfs at this level).
        allow(cfg["writable"], LL_READ_FILE | LL_READ_DIR | LL_WRITE_FILE | LL_MAKE_REG | LL_REMOVE_FILE
              | LL_TRUNCATE)
        if libc.syscall(LL_RESTRICT, ruleset, ctypes.c_uint32(0)) != 0:
            raise ConfineError(f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return abi >= 6


class _ArgCmp(ctypes.Structure):
    """libseccomp's ``struct scmp_arg_cmp``."""

    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


SCMP_ACT_ALLOW, SCMP_CMP_NE = 0x7FFF0000, 1
_LIBSECCOMP: list[Any] = []


def seccomp(signals_scoped: bool) -> None:
    """The filter, built with libseccomp through ctypes (the library ``preload`` opened): importing a
    binding package costs more CPU at every sandbox start than the filter itself."""
    import errno

    lib = _LIBSECCOMP[0]
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise ConfineError("seccomp_init failed")
    deny = 0x00050000 | errno.EPERM  # SCMP_ACT_ERRNO(EPERM): the program sees an ordinary error

    def rule(name: str, *args: tuple[int, int]) -> None:
        number = lib.seccomp_syscall_resolve_name(name.encode())
        if number < 0:
            return  # a syscall this architecture does not have
        cmps = (_ArgCmp * max(1, len(args)))(*[_ArgCmp(i, SCMP_CMP_NE, v, 0) for i, v in args])
        rc = lib.seccomp_rule_add_array(ctx, deny, number, len(args), cmps)
        if rc != 0:
            raise ConfineError(f"seccomp rule {name}: {os.strerror(-rc)}")

    try:
        for name in (*SECCOMP_DENY, *OTHER_PROCESS_BY_PIDFD):
            rule(name)
        for name in OTHER_PROCESS_BY_PID:
            rule(name, (0, 0))
        # setpriority(which, who) / ioprio_set(which, who): only "this process" (PRIO_USER with who=0 would
        # reach every process of the uid, the trainer's included when they share it).
        for name, own in (("setpriority", PRIO_PROCESS), ("ioprio_set", IOPRIO_WHO_PROCESS)):
            rule(name, (0, own))
            rule(name, (1, 0))
        if not signals_scoped:
            for name in SIGNAL_SYSCALLS:
                rule(name)
            rule("kill", (0, 0))
        rc = lib.seccomp_load(ctx)
        if rc != 0:
            raise ConfineError(f"seccomp_load: {os.strerror(-rc)}")
    finally:
        lib.seccomp_release(ctx)


def preload(cfg: dict[str, Any]) -> None:
    """Open libseccomp while it is visible (before ``build_root``); put binding paths on sys.path."""
    import sys

    for path in reversed(cfg.get("binding_paths", [])):
        if path not in sys.path:
            sys.path.insert(0, path)
    if "seccomp" in cfg["layers"] and not _LIBSECCOMP:
        # The library the trainer found (through pyseccomp), opened while it is still visible.
        _LIBSECCOMP.append(ctypes.CDLL(cfg.get("libraries", {}).get("seccomp") or "libseccomp.so.2",
                                       use_errno=True))


IN_MODIFY, IN_CREATE, IN_MOVED_TO, IN_NONBLOCK, IN_CLOEXEC = 0x2, 0x100, 0x80, 0o4000, 0o2000000


def watch_folder(path: str) -> int:
    """An inotify descriptor that becomes readable whenever a file in ``path`` is created or written."""
    libc = _libc()
    fd = int(libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC))
    if fd < 0 or libc.inotify_add_watch(fd, path.encode(), IN_MODIFY | IN_CREATE | IN_MOVED_TO) < 0:
        raise ConfineError(f"watch {path}: {os.strerror(ctypes.get_errno())}")
    return fd


def folder_bytes(path: str) -> int:
    """Apparent size of the regular files in ``path`` (a sparse file counts at its full length)."""
    total = 0
    with os.scandir(path) as entries:
        for entry in entries:
            try:
                total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                pass
    return total


def become_reaper() -> None:
    """Orphans of the program (a double-forked daemon) become our children, so the trainer can find them."""
    _check(_libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "child subreaper")


def confine_program(cfg: dict[str, Any]) -> None:
    """Everything after the fork, in the process that will run the program."""
    drop(cfg)
    limit(cfg)
    scoped = landlock(cfg) if "landlock" in cfg["layers"] else False
    if "seccomp" in cfg["layers"]:
        seccomp(scoped)
