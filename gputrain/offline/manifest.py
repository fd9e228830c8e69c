"""The prepared cache's record, and the check ``submit`` makes against it without touching the network.

``gputrain prepare`` writes ``<cache_dir>/gputrain-prepared.json``: every repository it pinned (commit,
files with sizes and hashes, the Arrow files ``datasets`` built). ``submit`` on an offline cluster looks up
each repository the plan loads, checks that the pinned files are in the cache at their recorded sizes, and
either returns the pins (copied into the plan, so ``plan.json`` names the commits the job reads) or
refuses in one line naming what is missing and the ``prepare`` command that fetches it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import ValidationError

from gputrain.atomic import write_atomic
from gputrain.contract.assets import HubItem, OfflineAssets, PinnedRepo
from gputrain.errors import UserError

MANIFEST = "gputrain-prepared.json"


def manifest_path(cache_dir: str | Path) -> Path:
    return Path(cache_dir) / MANIFEST


def read_manifest(cache_dir: str | Path) -> list[PinnedRepo]:
    """The pinned repositories recorded in ``cache_dir`` (none when it was never prepared)."""
    path = manifest_path(cache_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return [PinnedRepo.model_validate(r) for r in data["repos"]]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError, ValidationError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"{path}: not a gputrain prepare record ({reason}); delete it and run prepare again") \
            from None


def record(cache_dir: str | Path, pinned: PinnedRepo) -> None:
    """Add or replace ``pinned`` in the manifest (written whole, atomically)."""
    repos = [r for r in read_manifest(cache_dir) if not _same(r.item, pinned.item)] + [pinned]
    doc = {"version": 1, "repos": [r.model_dump(mode="json") for r in repos]}
    write_atomic(manifest_path(cache_dir), json.dumps(doc, indent=2, sort_keys=True) + "\n", 0o644)


def _same(a: HubItem, b: HubItem) -> bool:
    return (a.kind, a.repo, a.config, a.revision, a.files) == (b.kind, b.repo, b.config, b.revision, b.files)


def snapshot_dir(cache_dir: str | Path, pinned: PinnedRepo) -> Path:
    """Where ``huggingface_hub`` keeps the pinned commit's files (``$HF_HOME/hub``)."""
    folder = f"{pinned.item.kind}s--{pinned.item.repo.replace('/', '--')}"
    return Path(cache_dir) / "hub" / folder / "snapshots" / pinned.commit


def find(repos: list[PinnedRepo], item: HubItem) -> PinnedRepo | None:
    """The record that serves ``item``: same repository, config and revision, holding its splits."""
    for pinned in repos:
        if _same(pinned.item, item) and set(item.splits) <= set(pinned.item.splits):
            return pinned
    return None


def problems(cache_dir: str | Path, pinned: PinnedRepo) -> list[str]:
    """What is wrong with a pinned repository in the cache: missing files, wrong sizes (cheap: no hashing)."""
    found: list[str] = []
    base = snapshot_dir(cache_dir, pinned)
    for f in pinned.files:
        path = base / f.path
        if not path.exists():
            found.append(f"{f.path} missing")
        elif path.stat().st_size != f.size:
            found.append(f"{f.path} has {path.stat().st_size} bytes, not {f.size}")
    found += [f"{c} missing" for c in pinned.cache_files if not (Path(cache_dir) / c).exists()]
    return found


def check_cache(cache_dir: str, items: list[HubItem]) -> tuple[OfflineAssets, list[str]]:
    """(the pins for ``items`` found in ``cache_dir``, labels of the items missing or damaged there)."""
    repos = read_manifest(cache_dir) if os.path.isdir(cache_dir) else []
    pinned: list[PinnedRepo] = []
    missing: list[str] = []
    for item in items:
        hit = find(repos, item)
        if hit is None:
            missing.append(item.label + (f" split {','.join(item.splits)}" if item.splits else ""))
            continue
        wrong = problems(cache_dir, hit)
        if wrong:
            missing.append(f"{item.label} ({'; '.join(wrong[:2])}{' ...' if len(wrong) > 2 else ''})")
        else:
            pinned.append(hit)
    return OfflineAssets(cache_dir=cache_dir, repos=tuple(pinned)), missing
