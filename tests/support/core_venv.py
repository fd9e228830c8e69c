"""A venv holding what ``pip install .`` installs and nothing else: gputrain's wheel and the closure of its core
``dependencies`` (no extra: no torch, transformers, trl ...), linked from the running environment.

Installing from the package index would take a minute and need the network; linking the already-installed
distributions of exactly that closure (each distribution's top-level files from its ``RECORD``) gives the same
import path offline in well under a second. A package an extra brings is absent, so importing it fails as on
a user's fresh ``pip install .``.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

_NO_EXTRA = {"extra": ""}


def core_requirements(pyproject: Path) -> list[Requirement]:
    return [Requirement(r) for r in tomllib.loads(pyproject.read_text())["project"]["dependencies"]]


def closure(requirements: list[Requirement]) -> dict[str, metadata.Distribution]:
    """Installed distributions the requirements pull in (markers evaluated as pip would, no extras)."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(requirements)
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate(_NO_EXTRA):
            continue
        key = req.name.lower().replace("_", "-")
        if key in found:
            continue
        dist = metadata.distribution(req.name)
        found[key] = dist
        todo.extend(Requirement(r) for r in dist.requires or [])
    return found


def link_into(site: Path, dists: dict[str, metadata.Distribution]) -> list[str]:
    """Symlink each distribution's top-level entries into ``site``; returns the names linked."""
    linked: list[str] = []
    for dist in dists.values():
        for file in dist.files or []:
            top = file.parts[0]
            if top == ".." or top.endswith(".pth") or top == "__pycache__":
                continue
            source = Path(str(dist.locate_file(top)))
            target = site / top
            if source.exists() and not target.exists() and not target.is_symlink():
                target.symlink_to(source)
                linked.append(top)
    return linked


if __name__ == "__main__":  # python -m tests.support.core_venv: the closure, for a look
    for name, dist in sorted(closure(core_requirements(Path(sys.argv[1]) if len(sys.argv) > 1 else
                                                        Path("pyproject.toml"))).items()):
        print(name, dist.version)
