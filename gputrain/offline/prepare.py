"""``gputrain prepare``: fetch what a job loads from the hub into the cluster's cache, pinned and verified.

Run where the internet is (a SuperCloud login node). For each repository of
:func:`gputrain.offline.needs.hub_items`: resolve the asked revision to one commit, pick the files the
training loads (a model's config, generation config, tokenizer and safetensors weights, not its ``.bin``
copy, ONNX exports or README; a dataset's data files), download them with ``huggingface_hub`` (a file
already in the cache is not fetched again; an interrupted download resumes), check each against the
hub's size and hash (sha256 for LFS files, the git blob id otherwise), build the ``datasets`` Arrow cache
an offline ``load_dataset`` reads, and record the pin in the cache's manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from gputrain.atomic import write_atomic
from gputrain.contract.assets import HubItem, PinnedFile, PinnedRepo
from gputrain.errors import ClusterError, UserError
from gputrain.offline import manifest

#: Top-level model files ``from_pretrained`` reads (weights chosen separately: safetensors when present).
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt",
               "tokenizer.model", "chat_template.jinja", "chat_template.json", "*.tiktoken")
DATA_SUFFIXES = (".parquet", ".arrow", ".json", ".jsonl", ".csv", ".txt", ".json.gz", ".jsonl.gz")


@dataclass
class PrepareResult:
    pinned: PinnedRepo
    downloaded: list[str]
    downloaded_bytes: int
    verified: int


def choose_files(kind: str, config: str | None, siblings: list[dict[str, Any]],
                 files: str = "all") -> list[dict[str, Any]]:
    """The files of a repository the training reads, from the hub's file list (``files="tokenizer"``: a
    model's tokenizer and config only, for a job that builds its own network on that vocabulary)."""
    names = [s["path"] for s in siblings]
    if kind == "model" and files == "tokenizer":
        top = [s for s in siblings if "/" not in s["path"]]
        return sorted((s for s in top if any(fnmatch(s["path"], pat) for pat in MODEL_FILES)), key=lambda s: s["path"])
    if kind == "model":
        top = [s for s in siblings if "/" not in s["path"]]
        weights = [s for s in top if s["path"].endswith((".safetensors", ".safetensors.index.json"))]
        if not weights:
            weights = [s for s in top if fnmatch(s["path"], "pytorch_model*.bin")
                       or s["path"] == "pytorch_model.bin.index.json"]
        rest = [s for s in top if any(fnmatch(s["path"], pat) for pat in MODEL_FILES)]
        return sorted(weights + rest, key=lambda s: s["path"])
    in_config = config and any(n.startswith(f"{config}/") for n in names)
    data = [s for s in siblings if s["path"].endswith(DATA_SUFFIXES) and not s["path"].startswith(".")
            and (not in_config or s["path"].startswith(f"{config}/"))]
    return sorted(data, key=lambda s: s["path"])


def network_errors() -> tuple[type[BaseException], ...]:
    """What a failed connection raises through ``huggingface_hub``: its own HTTP error, ``OSError``, and the
    base error of whichever HTTP client it was built on (``httpx``, its fork ``httpx2``, ``requests``), as
    loaded by ``huggingface_hub`` itself (nothing is imported here for it)."""
    from huggingface_hub.errors import HfHubHTTPError

    found: list[type[BaseException]] = [HfHubHTTPError, OSError]
    for module, name in (("httpx2", "HTTPError"), ("httpx", "HTTPError"), ("requests", "RequestException")):
        error = getattr(sys.modules.get(module), name, None)
        if isinstance(error, type) and issubclass(error, BaseException):
            found.append(error)
    return tuple(found)


_COMMIT_RE = re.compile(r"\A[0-9a-f]{40}\Z")
_HASH_RE = re.compile(r"\A[0-9a-f]{40}(?:[0-9a-f]{24})?\Z")  # a git blob id (sha1) or an LFS sha256
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def safe_repo_path(name: object) -> bool:
    """Is a file name from the hub's listing a plain relative path inside the repository? Names from a
    server are data: absolute, ``..``, empty or ``.`` parts, backslashes and control characters never become
    a path on this machine (a hostile mirror's ``/home/me/.bashrc`` or ``data/../../x`` would otherwise be
    "removed as damaged" outside the cache)."""
    if not isinstance(name, str) or not name or len(name) > 1024 or "\\" in name or _CONTROL_RE.search(name):
        return False
    return not name.startswith("/") and all(part not in ("", ".", "..") for part in name.split("/"))


def _repo_info(api: Any, item: HubItem) -> tuple[str, list[dict[str, Any]]]:
    """(commit, [{path, size, sha256, blob_id}]) of ``item``'s revision; a listing with a name that is not
    a plain relative path, or a commit or hash that is not hex, is refused (exit 1) before anything is
    touched."""
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    info_of = api.model_info if item.kind == "model" else api.dataset_info
    try:
        info = info_of(item.repo, revision=item.revision, files_metadata=True)
    except RevisionNotFoundError:
        raise UserError(f"{item.label}: no revision {item.revision!r} on the hub") from None
    except RepositoryNotFoundError:
        raise UserError(f"{item.label}: no such repository on the hub (or it is gated: set HF_TOKEN)") from None
    except network_errors() as exc:
        raise ClusterError(f"{item.label}: cannot reach the hub ({_endpoint()}): {_line(exc)}") from None
    commit = str(info.sha)
    if not _COMMIT_RE.match(commit):
        raise ClusterError(f"{item.label}: the hub ({_endpoint()}) answered a commit id that is not 40 hex digits "
                           f"({commit[:60]!r}); refusing it")
    siblings = [{"path": s.rfilename, "size": s.size or 0, "blob_id": s.blob_id,
                 "sha256": s.lfs.sha256 if s.lfs else None} for s in (info.siblings or [])]
    for sib in siblings:
        if not safe_repo_path(sib["path"]):
            raise ClusterError(f"{item.label}: the hub ({_endpoint()}) lists a file name that is not a plain "
                               f"relative path ({str(sib['path'])[:120]!r}); refusing the repository")
        for key in ("blob_id", "sha256"):
            if sib[key] is not None and not (isinstance(sib[key], str) and _HASH_RE.match(sib[key])):
                raise ClusterError(f"{item.label}: the hub lists {sib['path']!r} with a {key} that is not a hash; "
                                   "refusing the repository")
        if not isinstance(sib["size"], int) or sib["size"] < 0:
            raise ClusterError(f"{item.label}: the hub lists {sib['path']!r} with a size that is not a count")
    return commit, siblings


def _endpoint() -> str:
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def file_ok(path: Path, expected: PinnedFile, *, hashes: bool) -> bool:
    """``path`` has the pinned size, and (``hashes``) the pinned sha256 or git blob id."""
    if not path.is_file() or path.stat().st_size != expected.size:
        return False
    if not hashes:
        return True
    if expected.sha256:
        digest = hashlib.sha256()
    elif expected.blob_id:
        digest = hashlib.sha1(b"blob %d\0" % expected.size)
    else:
        return True
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest() == (expected.sha256 or expected.blob_id)


def prepare_item(item: HubItem, cache_dir: str, *, verify_all: bool = False,
                 progress: Callable[[str], None] = lambda _: None) -> PrepareResult:
    """Fetch, verify and record one repository; files already in the cache at their size are kept."""
    from huggingface_hub import HfApi, hf_hub_download

    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT"))
    commit, siblings = _repo_info(api, item)
    chosen = choose_files(item.kind, item.config, siblings, item.files)
    if not chosen:
        raise UserError(f"{item.label}: the hub lists no file the training would load at {commit[:10]}")
    files = tuple(PinnedFile(path=s["path"], size=s["size"], sha256=s["sha256"], blob_id=s["blob_id"])
                  for s in chosen)
    pinned = PinnedRepo(item=item, commit=commit, files=files)
    snapshot = manifest.snapshot_dir(cache_dir, pinned)
    downloaded: list[str] = []
    size = 0
    verified = 0
    for f in files:
        present = file_ok(snapshot / f.path, f, hashes=verify_all)
        if not present:
            _remove(snapshot / f.path, cache_dir)  # a damaged copy is fetched again
            progress(f"  fetching {f.path} ({human(f.size)})")
            try:
                hf_hub_download(item.repo, f.path, repo_type=item.kind, revision=commit,
                                cache_dir=str(Path(cache_dir) / "hub"))
            except network_errors() as exc:
                raise ClusterError(f"{item.label}: downloading {f.path} failed: {_line(exc)} (run prepare again: "
                                   "finished files are kept, a partial one resumes)") from None
            downloaded.append(f.path)
            size += f.size
        if not present and not file_ok(snapshot / f.path, f, hashes=True):
            _remove(snapshot / f.path, cache_dir)
            raise ClusterError(f"{item.label}: {f.path} does not match the hub's size/hash (removed it; run "
                               "prepare again)")
        verified += 1 if (not present or verify_all) else 0
    _write_ref(cache_dir, pinned)
    if item.kind == "dataset":
        pinned = _dataset_cache(pinned, cache_dir, progress)
    manifest.record(cache_dir, pinned)
    return PrepareResult(pinned, downloaded, size, verified)


def _remove(link: Path, cache_dir: str) -> None:
    """Remove a snapshot file and the blob it links to (``huggingface_hub`` would re-link a kept blob);
    nothing outside the cache's ``hub/`` folder is ever removed."""
    hub = Path(cache_dir, "hub").resolve()
    if not (link.is_symlink() or link.exists()):
        return
    if not link.parent.resolve().is_relative_to(hub):
        raise ClusterError(f"{link}: outside the cache {hub}; not removing it")
    target = link.resolve()
    if target.is_relative_to(hub):
        target.unlink(missing_ok=True)
    link.unlink(missing_ok=True)


def _write_ref(cache_dir: str, pinned: PinnedRepo) -> None:
    """Point the cache's ``refs/<revision>`` at the pinned commit, as ``huggingface_hub`` does after an
    online load of a branch: code that loads the repository without ``revision=`` then finds it offline."""
    revision = pinned.item.revision
    if revision == pinned.commit or "/" in revision or revision.startswith("."):
        return
    ref = manifest.snapshot_dir(cache_dir, pinned).parent.parent / "refs" / revision
    write_atomic(ref, pinned.commit, 0o644)


def _dataset_cache(pinned: PinnedRepo, cache_dir: str, progress: Callable[[str], None]) -> PinnedRepo:
    """Build (or reuse) the Arrow files ``datasets`` reads offline, in a training-side process."""
    old = manifest.find(manifest.read_manifest(cache_dir), pinned.item)
    if old is not None and old.commit == pinned.commit and old.cache_files and not manifest.problems(cache_dir, old):
        return pinned.model_copy(update={"cache_files": old.cache_files, "item": old.item})
    progress(f"  building the datasets cache of {pinned.item.repo}")
    cmd = [sys.executable, "-m", "gputrain.train.hub_data", "--repo", pinned.item.repo, "--revision", pinned.commit]
    if pinned.item.config:
        cmd += ["--config", pinned.item.config]
    env = {**os.environ, "HF_HOME": cache_dir, "HF_HUB_CACHE": str(Path(cache_dir) / "hub")}
    env.pop("HF_DATASETS_CACHE", None)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClusterError(f"{pinned.item.label}: building the datasets cache failed: {_line(exc)}") from None
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ClusterError(f"{pinned.item.label}: building the datasets cache failed: {last}") from None
    if "error" in result:
        raise ClusterError(f"{pinned.item.label}: building the datasets cache failed: {result['error']}")
    missing = set(pinned.item.splits) - set(result["splits"])
    if missing:
        raise UserError(f"{pinned.item.label}: no split {', '.join(sorted(missing))} (it has "
                        f"{', '.join(result['splits'])}); set data.split")
    item = pinned.item.model_copy(update={"splits": tuple(result["splits"])})
    return pinned.model_copy(update={"item": item, "cache_files": tuple(result["cache_files"])})


def human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
