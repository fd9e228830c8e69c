"""Where the shipped ``templates/`` and ``recipes/`` live.

In a source checkout they sit at the repository's top level; in a wheel ``setup.py`` maps them into the
package as ``gputrain/templates`` and ``gputrain/recipes``. Both layouts are looked up, package first.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _find(name: str) -> Path:
    for candidate in (_PACKAGE / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"gputrain is installed without its {name}/ folder (looked in {_PACKAGE})")


def templates_dir() -> Path:
    return _find("templates")


def recipes_dir() -> Path:
    return _find("recipes")


def data_dir() -> Path:
    return _PACKAGE / "data"
