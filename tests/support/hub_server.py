"""A local Hugging Face hub: a real HTTP server answering the requests ``huggingface_hub`` and ``datasets`` make.

Point ``HF_ENDPOINT`` at :attr:`HubServer.url` and the real download code runs against it: repository
info (``/api/models/{repo}/revision/{rev}``, with ``siblings`` sizes, blob ids and LFS sha256), file trees
and paths-info (what ``HfFileSystem`` and ``datasets`` list data files with), and ``/resolve/`` downloads
with the headers the hub sends (``X-Repo-Commit``, ``ETag``/``X-Linked-Etag``, ``X-Linked-Size``, ranges
for resumed downloads). Each repository is a folder (see :mod:`tests.support.hub_repos`); its commit id
is derived from its files, so a changed file is a new commit. Every request is logged in
:attr:`HubServer.requests`, so a test can prove a step made none.

    with HubServer({("model", "org/name"): folder}) as hub:
        os.environ["HF_ENDPOINT"] = hub.url
"""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

LFS_SUFFIXES = (".safetensors", ".bin", ".parquet", ".arrow", ".pt")


@dataclass
class RepoFile:
    path: str
    data: bytes
    blob_id: str
    sha256: str | None  # set for files the hub stores with LFS

    @property
    def etag(self) -> str:
        return self.sha256 or self.blob_id


@dataclass
class Repo:
    kind: str
    repo_id: str
    files: dict[str, RepoFile] = field(default_factory=dict)
    commit: str = ""

    @classmethod
    def from_folder(cls, kind: str, repo_id: str, folder: Path) -> Repo:
        repo = cls(kind, repo_id)
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            data = path.read_bytes()
            rel = path.relative_to(folder).as_posix()
            blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            sha256 = hashlib.sha256(data).hexdigest() if rel.endswith(LFS_SUFFIXES) else None
            repo.files[rel] = RepoFile(rel, data, blob, sha256)
        listing = "".join(f"{f.path} {f.blob_id}\n" for f in repo.files.values())
        repo.commit = hashlib.sha1(f"{kind}:{repo_id}\n{listing}".encode()).hexdigest()
        return repo

    def entry(self, f: RepoFile) -> dict[str, Any]:
        """A file as the tree and paths-info endpoints describe it."""
        out: dict[str, Any] = {"type": "file", "path": f.path, "size": len(f.data), "oid": f.blob_id}
        if f.sha256:
            out["lfs"] = {"oid": f.sha256, "size": len(f.data), "pointerSize": 134}
        return out

    def info(self) -> dict[str, Any]:
        siblings = []
        for f in self.files.values():
            sib: dict[str, Any] = {"rfilename": f.path, "size": len(f.data), "blobId": f.blob_id}
            if f.sha256:
                sib["lfs"] = {"sha256": f.sha256, "size": len(f.data), "pointerSize": 134}
            siblings.append(sib)
        return {"_id": self.commit[:24], "id": self.repo_id, "sha": self.commit, "private": False,
                "gated": False, "disabled": False, "downloads": 0, "likes": 0, "tags": [],
                "lastModified": "2026-01-01T00:00:00.000Z", "createdAt": "2026-01-01T00:00:00.000Z",
                "cardData": {}, "siblings": siblings}


class HubServer:
    """The server; a context manager that runs it on 127.0.0.1 (ephemeral port) in a thread."""

    def __init__(self, repos: dict[tuple[str, str], Path]) -> None:
        self.repos = {key: Repo.from_folder(key[0], key[1], folder) for key, folder in repos.items()}
        self.requests: list[tuple[str, str]] = []
        self.unhandled: list[tuple[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def downloads(self) -> list[str]:
        """Paths of the file bodies served (GET on /resolve/)."""
        return [path for method, path in self.requests if method == "GET" and "/resolve/" in path]

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the test reads hub.requests
            pass

        def do_HEAD(self) -> None:
            self._dispatch(body=False)

        def do_GET(self) -> None:
            self._dispatch(body=True)

        def do_POST(self) -> None:
            self._dispatch(body=True)

        # -- routing ------------------------------------------------------------------------------------
        def _dispatch(self, body: bool) -> None:
            hub.requests.append((self.command, self.path))
            url = urllib.parse.urlsplit(self.path)
            parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
            query = urllib.parse.parse_qs(url.query)
            if parts[:1] == ["api"] and len(parts) >= 3 and parts[1] in ("models", "datasets"):
                kind = parts[1][:-1]
                width = 1 if (kind, parts[2]) in hub.repos else 2  # legacy ids without an owner: gpt2
                repo_id, rest = "/".join(parts[2:2 + width]), parts[2 + width:]
                if self.command == "POST" and rest[:1] == ["paths-info"] and len(rest) == 2:
                    return self._paths_info(kind, repo_id, rest[1])
                if not rest:
                    return self._info(kind, repo_id, "main", body)
                if rest[0] == "revision" and len(rest) == 2:
                    return self._info(kind, repo_id, rest[1], body)
                if rest[0] == "tree" and len(rest) >= 2:
                    return self._tree(kind, repo_id, rest[1], "/".join(rest[2:]), "recursive" in query, body)
            kind = "model"
            if parts[:1] == ["datasets"]:
                kind, parts = "dataset", parts[1:]
            if len(parts) >= 4 and parts[1] == "resolve" and (kind, parts[0]) in hub.repos:
                return self._resolve(kind, parts[0], parts[2], "/".join(parts[3:]), body)
            if len(parts) >= 5 and parts[2] == "resolve":
                return self._resolve(kind, "/".join(parts[:2]), parts[3], "/".join(parts[4:]), body)
            hub.unhandled.append((self.command, self.path))
            self._json({"error": "not found"}, 404, body, code="EntryNotFound")

        def _repo(self, kind: str, repo_id: str, revision: str, body: bool) -> Repo | None:
            repo = hub.repos.get((kind, repo_id))
            if repo is None:
                self._json({"error": f"Repository Not Found for url: {self.path}."}, 404, body, code="RepoNotFound")
                return None
            if revision not in ("main", repo.commit):
                self._json({"error": f"Invalid rev id: {revision}"}, 404, body, code="RevisionNotFound")
                return None
            return repo

        def _info(self, kind: str, repo_id: str, revision: str, body: bool) -> None:
            repo = self._repo(kind, repo_id, revision, body)
            if repo is not None:
                self._json(repo.info(), 200, body)

        def _tree(self, kind: str, repo_id: str, revision: str, prefix: str, recursive: bool, body: bool) -> None:
            repo = self._repo(kind, repo_id, revision, body)
            if repo is None:
                return
            base = f"{prefix.rstrip('/')}/" if prefix else ""
            entries: dict[str, dict[str, Any]] = {}
            for f in repo.files.values():
                if not f.path.startswith(base):
                    continue
                rest = f.path[len(base):]
                if "/" in rest and not recursive:
                    sub = base + rest.split("/")[0]
                    entries[sub] = {"type": "directory", "path": sub, "size": 0,
                                    "oid": hashlib.sha1(sub.encode()).hexdigest()}
                else:
                    if recursive:
                        for i, _ in enumerate(rest.split("/")[:-1]):
                            sub = base + "/".join(rest.split("/")[: i + 1])
                            entries[sub] = {"type": "directory", "path": sub, "size": 0,
                                            "oid": hashlib.sha1(sub.encode()).hexdigest()}
                    entries[f.path] = repo.entry(f)
            if prefix and not entries:
                self._json({"error": f"{prefix} does not exist"}, 404, body, code="EntryNotFound")
                return
            self._json(list(entries.values()), 200, body)

        def _paths_info(self, kind: str, repo_id: str, revision: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode() if length else ""
            if self.headers.get("Content-Type", "").startswith("application/json"):
                paths = list(json.loads(raw or "{}").get("paths", []))
            else:
                paths = urllib.parse.parse_qs(raw).get("paths", [])
            repo = self._repo(kind, repo_id, revision, True)
            if repo is None:
                return
            out: list[dict[str, Any]] = []
            for path in paths:
                path = path.strip("/")
                if path in repo.files:
                    out.append(repo.entry(repo.files[path]))
                elif any(p.startswith(path + "/") for p in repo.files) or path == "":
                    out.append({"type": "directory", "path": path, "size": 0,
                                "oid": hashlib.sha1(path.encode()).hexdigest()})
            self._json(out, 200, True)

        def _resolve(self, kind: str, repo_id: str, revision: str, path: str, body: bool) -> None:
            repo = self._repo(kind, repo_id, revision, body)
            if repo is None:
                return
            f = repo.files.get(path)
            if f is None:
                self._json({"error": f"{path} not found"}, 404, body, code="EntryNotFound")
                return
            data, status = f.data, 200
            ranged = self.headers.get("Range", "")
            if ranged.startswith("bytes=") and ranged[6:].split("-")[0].isdigit():
                start = int(ranged[6:].split("-")[0])
                data, status = f.data[start:], 206
            self.send_response(status)
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("ETag", f'"{f.etag}"')
            if f.sha256:
                self.send_header("X-Linked-Etag", f'"{f.sha256}"')
                self.send_header("X-Linked-Size", str(len(f.data)))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def _json(self, doc: Any, status: int, body: bool, code: str | None = None) -> None:
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if code:
                self.send_header("X-Error-Code", code)
                self.send_header("X-Error-Message", str(doc.get("error", code)) if isinstance(doc, dict) else code)
            self.end_headers()
            if body:
                self.wfile.write(data)

    return Handler
