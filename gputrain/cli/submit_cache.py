"""Reuse of prepared Slurm jobs: an identical ``gputrain submit`` command skips planning and rendering.

Why: a single submit is mostly start-up. Typer, the recipe schema (pydantic) and Jinja cost several times what
``sbatch`` itself does, and people resubmit the same command often (a queue of runs of one recipe, a run
that crashed on a node). So the first submit of a command stores its :class:`PreparedJob` (the rendered
job folder with the submission time left blank), and a later identical command replays it, importing only
the standard library, the Slurm backend and the registry. It never reaches Typer: this module is tried
before the app is loaded (:mod:`gputrain.cli.main`).

An entry is used only when nothing it was made from has changed:

- the command line after ``submit``, the working folder, the interpreter, every ``GPUTRAIN_*`` variable,
  ``HOME`` and ``XDG_CONFIG_HOME`` (the entry's file name is a hash of all of these);
- the recipe file and every file it extends, the cluster profiles file, and the file the recipe argument
  would name in the working folder (content hashes, or "absent" - creating one later changes the plan);
- gputrain's own code, templates, GPU catalog and bundled recipes (size and mtime of every file).

What can change on the cluster side (partitions, GRES) is asked on every submit anyway (``sinfo``, then
``sbatch`` itself). Plans that detect the local GPU are not stored. ``--no-cache`` or
``GPUTRAIN_SUBMIT_CACHE=0`` turns reuse off; an unreadable entry is ignored, never an error.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from gputrain.atomic import write_atomic

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~10 ms of start-up, and a replayed submit imports this module
    from typing import Any

VERSION = 2
KEEP = 256  # entries kept; the oldest go first
_ENV_KEYS = ("HOME", "XDG_CONFIG_HOME")


def enabled(argv: Sequence[str]) -> bool:
    return "--no-cache" not in argv and os.environ.get("GPUTRAIN_SUBMIT_CACHE", "1") != "0"


def cache_dir() -> Path:
    home = os.environ.get("GPUTRAIN_HOME")
    base = Path(home).expanduser() if home else Path("~/.local/share/gputrain").expanduser()
    return base / "cache" / "submit"


def entry_path(argv: Sequence[str]) -> Path:
    env = {k: v for k, v in os.environ.items() if k.startswith("GPUTRAIN_") or k in _ENV_KEYS}
    material = json.dumps([VERSION, list(argv), os.getcwd(), sys.executable, sys.version, sorted(env.items())])
    return cache_dir() / (hashlib.sha256(material.encode()).hexdigest()[:32] + ".json")


def file_fingerprint(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return "absent"
    except OSError as exc:  # a folder, unreadable: a state of its own, never equal to a content hash
        return f"unreadable:{exc.errno}"


def package_fingerprint() -> str:
    """Size and mtime of every file of gputrain, its templates and bundled recipes (about 1 ms)."""
    from gputrain.resources import recipes_dir, templates_dir

    package = Path(__file__).resolve().parents[1]
    rows: list[str] = []
    for root in dict.fromkeys((package, templates_dir(), recipes_dir())):
        _walk(str(root), rows)
    rows.sort()
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()


def _walk(folder: str, rows: list[str]) -> None:
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name != "__pycache__":
                    _walk(entry.path, rows)
            elif not entry.name.endswith((".pyc", ".pyo")):
                st = entry.stat()
                rows.append(f"{entry.path}\0{st.st_size}\0{st.st_mtime_ns}")


def store(argv: Sequence[str], jobs: Sequence[tuple[Any, dict[str, Any]]], inputs: Sequence[Path]) -> None:
    """Keep ``jobs`` ((PreparedJob, view) pairs) for replays of ``argv``; a failed write is ignored."""
    entry = {
        "version": VERSION,
        "package": package_fingerprint(),
        "inputs": {str(p.absolute()): file_fingerprint(p) for p in inputs},
        "jobs": [{"job": job.to_dict(), "view": view} for job, view in jobs],
    }
    path = entry_path(argv)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(entry), 0o600)
        _prune(path.parent)
    except OSError:
        pass


def _prune(folder: Path) -> None:
    entries = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    for old in entries[: max(0, len(entries) - KEEP)]:
        old.unlink(missing_ok=True)


def lookup(argv: Sequence[str]) -> dict[str, Any] | None:
    """The stored entry for ``argv`` if everything it was made from is unchanged, else None."""
    try:
        entry = json.loads(entry_path(argv).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("version") != VERSION:
        return None
    inputs = entry.get("inputs")
    if not isinstance(inputs, dict) or not all(file_fingerprint(Path(p)) == fp for p, fp in inputs.items()):
        return None
    if entry.get("package") != package_fingerprint():
        return None
    return entry


def submit_from_cache(argv: Sequence[str]) -> bool:
    """Submit from a stored entry; False when there is none (the caller then runs the full command)."""
    if not enabled(argv):
        return False
    entry = lookup(argv)
    if entry is None:
        return False
    from gputrain.backends.slurm import PreparedJob

    try:
        jobs = [(PreparedJob.from_dict(item["job"]), dict(item["view"])) for item in entry["jobs"]]
    except (KeyError, TypeError):
        return False
    submit_all(jobs)
    return True


def submit_all(jobs: Sequence[tuple[Any, dict[str, Any]]]) -> None:
    """Submit prepared jobs in order and print what ``gputrain submit`` prints (both paths use this)."""
    from gputrain.backends.slurm import SlurmBackend
    from gputrain.errors import ClusterError, GputrainError

    if not jobs:
        return
    first = jobs[0][1]
    backend = SlurmBackend(debug=bool(first.get("debug")))
    done: list[str] = []
    rows: list[dict[str, Any]] = []
    warned: set[str] = set()  # a sweep's points mostly share their warnings: each is said once
    for job, view in jobs:
        try:
            result = backend.submit_prepared(job, dry_run=bool(view.get("dry_run")))
        except GputrainError as exc:
            if not done:
                raise
            raise ClusterError(f"{exc.message} (after {len(done)} of {len(jobs)} jobs were submitted: "
                               f"{', '.join(done)})", exit_code=exc.exit_code) from None
        done.append(result.job_id)
        rows.append({"job_id": result.job_id, "job_dir": str(result.job_dir), "dry_run": bool(view.get("dry_run")),
                     **({"sweep": job.sweep} if job.sweep else {})})
        if not first.get("json"):
            for warning in view.get("warnings", []):
                if warning not in warned:
                    print(f"warning: {warning}", file=sys.stderr)
                    warned.add(warning)
            _print_text(view, result)
    if first.get("json"):
        print(json.dumps(rows if first.get("sweep") else rows[0]))


def _print_text(view: dict[str, Any], result: Any) -> None:
    point = f", {' '.join(view['point'])}" if view.get("point") else ""
    where = f"{view['shape']} on {view['cluster']}{point}"
    if view.get("dry_run"):
        print(f"dry run: wrote {result.job_dir}/job.sbatch ({where}); submit it with sbatch")
    else:
        print(f"submitted job {result.job_id} ({view['recipe']}, {where})")
        print(f"job folder: {result.job_dir}")
