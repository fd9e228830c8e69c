"""Whole-recipe validation for ``gputrain validate``: the base recipe and every profile/preset merged in.

Planning validates only the profile it picks; a typo in the B200 profile should not wait until somebody
plans for a B200.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gputrain.errors import RecipeError, suggestion
from gputrain.hardware.catalog import catalog
from gputrain.recipe.loader import RecipeSource, apply_overrides, deep_merge, load_source, validate_source


def validate_recipe_file(path: Path, overrides: Iterable[str] = ()) -> str:
    overrides = list(overrides)
    source = load_source(path)
    recipe = validate_source(apply_overrides(source, overrides))
    known = catalog()
    checked = 0
    for name, profile in recipe.profiles.items():
        if name not in known:
            raise RecipeError(f"{source.where(('profiles', name))}: profile {name!r} is not a catalog GPU; "
                              + suggestion(name, known))
        layers: list[tuple[tuple[str, ...], dict[str, Any]]] = [(("profiles", name, "set"), profile.set)]
        layers += [(("profiles", name, "presets", p), v) for p, v in profile.presets.items()]
        for origin, layer in layers:
            data = deep_merge(source.data, profile.set)
            if origin[2] == "presets":
                data = deep_merge(data, layer)
            marks = dict(source.marks)
            marks.update({key[len(origin):]: loc for key, loc in source.marks.items()
                          if key[: len(origin)] == origin and len(key) > len(origin)})
            validate_source(apply_overrides(RecipeSource(source.path, data, marks), overrides))
            checked += 1
    return f"{recipe.name}, entrypoint {recipe.entrypoint}, {len(recipe.profiles)} profiles, {checked} variants"
