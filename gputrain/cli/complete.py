"""Shell completion of values: recipe names, GPU types, clusters, presets and job ids.

Typer calls these only while completing (``_GPUTRAIN_COMPLETE=...``), never on a normal start; each imports
what it reads inside the function (the catalog, the cluster profiles, the registry: YAML and SQLite, no
training library) and swallows every error, since a completion that raises prints a traceback into the
user's prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer


def _safe(values: Callable[[], list[str]], incomplete: str) -> list[str]:
    try:
        found = values()
    except Exception:
        return []
    return sorted({v for v in found if v.startswith(incomplete)})


def recipes(incomplete: str) -> list[str]:
    """Bundled recipe names, and YAML files under the folder being typed."""

    def values() -> list[str]:
        from gputrain.resources import recipes_dir

        names = [p.stem for p in recipes_dir().glob("*.yaml")]
        folder = Path(incomplete).parent if incomplete else Path(".")
        files = [str(folder / p.name) if str(folder) != "." else p.name
                 for p in folder.glob("*") if p.suffix in (".yaml", ".yml") or p.is_dir()]
        return names + files

    return _safe(values, incomplete)


def gpus(incomplete: str) -> list[str]:
    def values() -> list[str]:
        from gputrain.hardware.catalog import known_names

        return [*known_names(), "cpu"]

    return _safe(values, incomplete)


def clusters(incomplete: str) -> list[str]:
    def values() -> list[str]:
        from gputrain.hardware.clusters import list_clusters

        return [c.name for c in list_clusters()]

    return _safe(values, incomplete)


def presets(ctx: typer.Context, incomplete: str) -> list[str]:
    """The presets of the recipe on the command line where click has parsed it, else of every bundled recipe
    (while completing, click does not always hand the positional value over)."""

    def values() -> list[str]:
        from gputrain.cli.core import resolve_recipe_path
        from gputrain.recipe.loader import load_source
        from gputrain.resources import recipes_dir

        recipe = (ctx.params or {}).get("recipe")
        paths = [resolve_recipe_path(str(recipe))] if recipe else sorted(recipes_dir().glob("*.yaml"))
        out = []
        for path in paths:
            profiles = load_source(path).data.get("profiles") or {}
            out += [str(name) for p in profiles.values() if isinstance(p, dict) for name in (p.get("presets") or {})]
        return out

    return _safe(values, incomplete)


def jobs(incomplete: str) -> list[str]:
    """Job ids from the registry, newest first (the shell sorts them anyway)."""

    def values() -> list[str]:
        from gputrain.registry.store import JobRegistry

        return [r.job_id for r in JobRegistry().list(200)]

    return _safe(values, incomplete)
