"""The job registry: one SQLite file shared by every gputrain process of a user.

Several ``gputrain submit`` processes may write at once, so the file runs in WAL mode, every write is one
``BEGIN IMMEDIATE`` transaction (the writer lock is taken up front, no upgrade deadlocks) and a busy timeout
lets writers queue instead of failing. The switch to WAL is the exception: SQLite answers "database is
locked" at once, without waiting, to a ``PRAGMA journal_mode = WAL`` racing another process that opens the
same new file (two ``gputrain`` commands started together on a fresh home), so :func:`_use_wal` retries it.
Location: ``$GPUTRAIN_HOME/jobs.db`` (default ``~/.local/share/gputrain/jobs.db``).
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import os
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gputrain.contract.jobstate import FINAL_STATES, STATES
from gputrain.errors import RegistryError, UnknownJobError

__all__ = ["BACKENDS", "FINAL_STATES", "STATES", "JobRecord", "JobRegistry"]

BACKENDS = ("local", "slurm", "runpod")
"""The shipped backends (``gputrain.backends.table`` is their home; a test keeps the two equal). The registry
stores any well-formed backend name, so a new backend is one row in that table."""
_BACKEND_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_BUSY_TIMEOUT_S = 30.0
def _use_wal(conn: sqlite3.Connection) -> None:
    """Put the file in WAL mode (a no-op once it is), retrying the switch that SQLite refuses at once, busy
    timeout or not, while another process opens the same new file; gives up after the busy timeout."""
    deadline = time.monotonic() + _BUSY_TIMEOUT_S
    pause = 0.002
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            pause = min(2 * pause, 0.1)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    backend TEXT NOT NULL,
    name TEXT NOT NULL DEFAULT '',
    cluster TEXT,
    recipe TEXT,
    recipe_path TEXT,
    job_dir TEXT,
    state TEXT NOT NULL,
    gpu TEXT,
    gpus_per_node INTEGER,
    nodes INTEGER,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    exit_code INTEGER,
    extra TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS jobs_job_id ON jobs(job_id);
CREATE INDEX IF NOT EXISTS jobs_name ON jobs(name);
CREATE INDEX IF NOT EXISTS jobs_job_dir ON jobs(job_dir);
"""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class JobRecord:
    """One submitted job. ``id`` is the registry's own row number; ``job_id`` the backend's id."""

    job_id: str
    backend: str
    name: str = ""
    cluster: str | None = None
    recipe: str | None = None
    recipe_path: str | None = None
    job_dir: str | None = None
    state: str = "PENDING"
    gpu: str | None = None
    gpus_per_node: int | None = None
    nodes: int | None = None
    created_at: str = ""
    updated_at: str = ""
    exit_code: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_COLUMNS = [f.name for f in dataclasses.fields(JobRecord) if f.name != "id"]
_UPDATABLE = frozenset(_COLUMNS) - {"created_at", "updated_at"}


def default_path() -> Path:
    from gputrain.home import gputrain_home

    return gputrain_home() / "jobs.db"


INVALID_EXTRA_KEY = "invalid_extra"


def _load_extra(raw: str | None, db: Path, job_id: str) -> dict[str, Any]:
    """Decode a row's ``extra`` column without letting one bad row break ``gputrain jobs`` for every job.

    The column can be damaged by hand edits or a truncated write from an old version. The row is still
    listed: its extra becomes ``{"invalid_extra": <the raw text>}`` so nothing is lost (an ``update`` merges
    into it and writes it back as valid JSON), and one warning line names the file and the job.
    """
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        why = f"not valid JSON ({exc})"
    else:
        if isinstance(value, dict):
            return value
        why = f"a JSON {type(value).__name__}, not an object"
    print(f"gputrain: warning: {db}: job {job_id}: the extra column is {why}; shown as {INVALID_EXTRA_KEY}",
          file=sys.stderr)
    return {INVALID_EXTRA_KEY: raw}


def _row_to_record(row: sqlite3.Row, db: Path) -> JobRecord:
    data = {k: row[k] for k in row.keys()}  # noqa: SIM118 - sqlite3.Row is not a mapping
    data["extra"] = _load_extra(data["extra"], db, data["job_id"])
    return JobRecord(**data)


class JobRegistry:
    """Transactional job store; cheap to create (one connection per call, no long-lived locks)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        self._ready = False

    def read_only(self) -> bool:
        """The registry's folder (or file) cannot be written: a read-only ``$GPUTRAIN_HOME``."""
        folder = self.path.parent
        if not folder.exists():
            return not os.access(next((p for p in folder.parents if p.exists()), Path("/")), os.W_OK)
        return not os.access(folder, os.W_OK) or (self.path.exists() and not os.access(self.path, os.W_OK))

    def _open(self, write: bool) -> sqlite3.Connection | None:
        """A connection, or None for reading a registry that does not exist and cannot be created."""
        if not write and self.read_only():
            if not self.path.exists():
                return None
            # Reading a WAL database read-only needs its -shm file; without one, read the file as it is.
            for query in ("mode=ro", "immutable=1"):
                try:
                    conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?{query}", uri=True,
                                           timeout=_BUSY_TIMEOUT_S, isolation_level=None)
                    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
                    return conn
                except sqlite3.Error:
                    continue
            raise RegistryError(f"{self.path}: cannot read the job registry (read-only and unreadable)")
        if write and self.read_only():
            raise RegistryError(f"{self.path}: the job registry is read-only here ($GPUTRAIN_HOME is not "
                                "writable); read commands still work")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise RegistryError(f"{self.path}: cannot open the job registry: {exc}") from None

    @contextmanager
    def _connect(self, write: bool) -> Iterator[sqlite3.Connection | None]:
        conn = self._open(write)
        if conn is None:
            yield None
            return
        conn.row_factory = sqlite3.Row
        writable = write or not self.read_only()
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT_S * 1000)}")
            if not self._ready and writable:
                _use_wal(conn)
                conn.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}COMMIT;")
                self._ready = True
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
            except BaseException:
                # The failed statement may already have ended the transaction (ON CONFLICT ROLLBACK, a full
                # disk, an I/O error); a second error from ROLLBACK must not replace the one that matters.
                if conn.in_transaction:
                    with suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            raise RegistryError(f"{self.path}: job registry error: {exc}") from None
        finally:
            conn.close()

    def add(self, record: JobRecord, locate: Callable[[str], Path] | None = None) -> JobRecord:
        """Insert ``record``; an empty ``job_id`` becomes ``<backend>-<id>`` (e.g. ``local-7``). ``locate(job_id)``
        places the job's folder and returns it inside the transaction (``name`` and ``job_dir`` follow); if it
        raises, nothing is recorded. Callers: :mod:`gputrain.registry.transitions` only."""
        if not _BACKEND_NAME.fullmatch(record.backend):
            raise RegistryError(f"backend name {record.backend!r} is not a lower-case word (e.g. {BACKENDS[0]})")
        if record.state not in STATES:
            raise RegistryError(f"unknown job state {record.state!r}")
        now = _now()
        rec = dataclasses.replace(record, created_at=record.created_at or now, updated_at=now)
        values = rec.to_dict()
        values["extra"] = json.dumps(rec.extra, sort_keys=True)
        values["job_id"] = rec.job_id or ""
        cols = ", ".join(_COLUMNS)
        marks = ", ".join(f":{c}" for c in _COLUMNS)
        with self._connect(write=True) as conn:
            assert conn is not None
            cur = conn.execute(f"INSERT INTO jobs ({cols}) VALUES ({marks})", values)
            row_id = cur.lastrowid
            assert row_id is not None
            if not rec.job_id:
                rec.job_id = f"{rec.backend}-{row_id}"
            if locate is not None:
                job_dir = locate(rec.job_id)
                rec.name, rec.job_dir = job_dir.name, str(job_dir)
            if rec.job_id != values["job_id"] or locate is not None:
                conn.execute("UPDATE jobs SET job_id = ?, name = ?, job_dir = ? WHERE id = ?",
                             (rec.job_id, rec.name, rec.job_dir, row_id))
        rec.id = row_id
        return rec

    def update(self, job_id: str, **fields: Any) -> JobRecord:
        """Change fields of the newest job with ``job_id``; ``extra`` is merged into the stored dict."""
        unknown = set(fields) - _UPDATABLE
        if unknown:
            raise RegistryError(f"cannot update job field(s): {', '.join(sorted(unknown))}")
        if "state" in fields and fields["state"] not in STATES:
            raise RegistryError(f"unknown job state {fields['state']!r}")
        with self._connect(write=True) as conn:
            assert conn is not None
            row = conn.execute(
                "SELECT * FROM jobs WHERE job_id = ? ORDER BY id DESC LIMIT 1", (str(job_id),)
            ).fetchone()
            if row is None:
                raise UnknownJobError(f"no job {job_id!r} in the registry ({self.path})")
            rec = _row_to_record(row, self.path)
            if "extra" in fields:
                fields = {**fields, "extra": {**rec.extra, **(fields["extra"] or {})}}
            rec = dataclasses.replace(rec, **fields, updated_at=_now())
            sets = {k: getattr(rec, k) for k in [*fields, "updated_at"]}
            if "extra" in sets:
                sets["extra"] = json.dumps(sets["extra"], sort_keys=True)
            assignments = ", ".join(f"{k} = :{k}" for k in sets)
            conn.execute(f"UPDATE jobs SET {assignments} WHERE id = :_id", {**sets, "_id": rec.id})
        return rec

    def find(self, ref: str) -> JobRecord | None:
        """The newest job whose job_id, name or job dir (any spelling of the path) is ``ref``."""
        ref = str(ref)
        candidates = [ref]
        try:
            # Backends store ``absolute()`` paths (symlinks kept); a user may type a relative or resolved one.
            candidates += [str(Path(ref).expanduser().absolute()), str(Path(ref).expanduser().resolve())]
        except (OSError, RuntimeError):
            pass
        with self._connect(write=False) as conn:
            if conn is None:
                return None
            for column in ("job_id", "name", "job_dir"):
                for value in candidates if column == "job_dir" else [ref]:
                    row = conn.execute(
                        f"SELECT * FROM jobs WHERE {column} = ? ORDER BY id DESC LIMIT 1", (value,)
                    ).fetchone()
                    if row is not None:
                        return _row_to_record(row, self.path)
        return None

    def get(self, ref: str) -> JobRecord:
        rec = self.find(ref)
        if rec is None:
            raise UnknownJobError(f"no job {ref!r} in the registry ({self.path}); see `gputrain jobs`")
        return rec

    def list(
        self, limit: int | None = 50, *, backend: str | None = None, state: str | None = None,
        recipe: str | None = None,
    ) -> list[JobRecord]:
        """Jobs newest first; ``backend``, ``state`` and ``recipe`` filter by equality."""
        sql = "SELECT * FROM jobs"
        where = [(column, value) for column, value in (("backend", backend), ("state", state), ("recipe", recipe))
                 if value]
        args: list[Any] = [value for _, value in where]
        if where:
            sql += " WHERE " + " AND ".join(f"{column} = ?" for column, _ in where)
        sql += " ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        with self._connect(write=False) as conn:
            if conn is None:
                return []
            return [_row_to_record(r, self.path) for r in conn.execute(sql, args).fetchall()]

    def forget(self, records: Iterable[JobRecord]) -> builtins.list[JobRecord]:
        """Remove ``records`` from the registry if they are still in a final state (checked inside the one
        write transaction, so a job that some other process just requeued is kept); returns those removed.
        Job folders stay on disk."""
        rows = [r for r in records if r.id is not None]
        final = sorted(FINAL_STATES)
        removed: builtins.list[JobRecord] = []
        with self._connect(write=True) as conn:
            assert conn is not None  # a write opens the file or raises
            for rec in rows:
                cur = conn.execute(
                    f"DELETE FROM jobs WHERE id = ? AND state IN ({', '.join('?' * len(final))})", (rec.id, *final)
                )
                if cur.rowcount:
                    removed.append(rec)
        return removed
