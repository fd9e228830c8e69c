"""Load a recipe from YAML with positions, so every error can say file:line:column.

The YAML is composed into nodes (which carry marks) rather than loaded straight to dicts; alongside the
data we keep a map from each dotted path to where it was written. ``extends:`` merges a base recipe under
this one, ``--set a.b=v`` overrides go on top, and a profile merged by the planner keeps the positions of
its own lines — so a bad value is always reported where the user wrote it.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from gputrain import safeyaml
from gputrain.errors import RecipeError
from gputrain.recipe.entrypoints import ENTRYPOINTS
from gputrain.recipe.schema import Recipe, algorithm_model

Key = tuple[str, ...]


@dataclass(frozen=True)
class Location:
    file: str
    line: int
    column: int

    def __str__(self) -> str:  # line 0: no position to show (a --set text is not a file)
        return f"{self.file}:{self.line}:{self.column}" if self.line else self.file


@dataclass
class RecipeSource:
    """Raw recipe data plus where each value came from."""

    path: Path
    data: dict[str, Any]
    marks: dict[Key, Location] = field(default_factory=dict)

    def where(self, key: Key) -> str:
        for n in range(len(key), -1, -1):
            loc = self.marks.get(key[:n])
            if loc is not None:
                return str(loc)
        return str(self.path)


#: Longest ``extends:`` chain followed (a recipe extending a recipe extending ...).
MAX_EXTENDS = 16
RECIPE_SUFFIXES = (".yaml", ".yml")


def _loader_class() -> type[yaml.SafeLoader]:
    return safeyaml.loader_class()


_SCALARS = yaml.constructor.SafeConstructor()


def _node_to_data(
    node: yaml.Node, key: Key, marks: dict[Key, Location], file: str, _open: frozenset[int] = frozenset()
) -> Any:
    here = Location(file, node.start_mark.line + 1, node.start_mark.column + 1)
    marks[key] = here
    if id(node) in _open:  # an alias pointing at one of its own parents (`a: &x [*x]`)
        raise RecipeError(f"{here}: recursive YAML alias")
    if isinstance(node, yaml.MappingNode | yaml.SequenceNode):
        _open = _open | {id(node)}
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            name = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(name, str) or name == "<<":
                loc = Location(file, key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                raise RecipeError(f"{loc}: mapping keys must be plain names")
            if name in out:
                loc = Location(file, key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                raise RecipeError(f"{loc}: duplicate key {'.'.join((*key, name))!r}")
            out[name] = _node_to_data(value_node, (*key, name), marks, file, _open)
            marks[(*key, name)] = Location(file, key_node.start_mark.line + 1, key_node.start_mark.column + 1)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_node_to_data(item, (*key, str(i)), marks, file, _open) for i, item in enumerate(node.value)]
    try:
        return _SCALARS.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        # `!!int abc`, an unknown tag such as `!!python/object`, a date like 2024-13-45
        problem = getattr(exc, "problem", None) or str(exc)
        raise RecipeError(f"{here}: invalid YAML value {node.value!r}: {problem.splitlines()[0]}") from None


def parse_yaml(text: str, file: str) -> tuple[Any, dict[Key, Location]]:
    """YAML text → (data, marks); syntax errors and documents over the budget (``gputrain.safeyaml``:
    size, nesting, alias expansion) become one-line RecipeErrors."""
    node = safeyaml.compose(text, file, RecipeError)
    marks: dict[Key, Location] = {}
    if node is None:
        return None, marks
    return _node_to_data(node, (), marks, file), marks


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def load_source(path: str | Path, _seen: tuple[Path, ...] = ()) -> RecipeSource:
    """Read a recipe file (following ``extends:``) without validating it."""
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"{path}: recipe file not found")
    resolved = path.resolve()
    if resolved in _seen:
        raise RecipeError(f"{path}: extends loop: {' -> '.join(str(p) for p in (*_seen, resolved))}")
    if len(_seen) > MAX_EXTENDS:
        raise RecipeError(f"{_seen[0]}: extends chain longer than {MAX_EXTENDS} files")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"{path}: cannot read recipe: {exc}") from None
    data, marks = parse_yaml(text, str(path))
    if data is None:
        raise RecipeError(f"{path}:1:1: the recipe is empty")
    if not isinstance(data, dict):
        raise RecipeError(f"{path}:1:1: a recipe must be a mapping of sections, got {type(data).__name__}")
    parent = data.pop("extends", None)
    if parent is None:
        return RecipeSource(path, data, marks)
    here = marks[("extends",)]
    if not isinstance(parent, str):
        raise RecipeError(f"{here}: extends must be a file name")
    target = path.parent / parent
    if target.suffix not in RECIPE_SUFFIXES:
        raise RecipeError(f"{here}: extends: {target} is not a recipe file ({' or '.join(RECIPE_SUFFIXES)})")
    if not target.is_file():
        raise RecipeError(f"{here}: extends: {target}: recipe file not found")
    base = _load_parent(target, (*_seen, resolved), here)
    merged_marks = dict(base.marks)
    merged_marks.update({k: v for k, v in marks.items() if k != ("extends",)})
    return RecipeSource(path, deep_merge(base.data, data), merged_marks)


def _load_parent(target: Path, seen: tuple[Path, ...], here: Location) -> RecipeSource:
    """A file named by ``extends:``: a recipe (or partial recipe), or a one-line error that never quotes
    its content (``extends: ~/.ssh/config.yaml`` must not print the file)."""
    base = load_source(target, seen)
    unknown = set(base.data) - set(Recipe.model_fields)
    if unknown:
        raise RecipeError(f"{here}: extends: {target} is not a recipe ({len(unknown)} section(s) a recipe "
                          "does not have)")
    return base


#: one ``--set`` parsed: the key path, its value, where it came from
Override = tuple[Key, Any, Location]


def parse_overrides(source: RecipeSource, overrides: Iterable[str]) -> list[Override]:
    """Parse ``--set a.b=value`` lines once (values as YAML, strings kept for string fields of ``source``)."""
    parsed: list[Override] = []
    for text in overrides:
        dotted, sep, raw = text.partition("=")
        key = tuple(part for part in dotted.strip().split("."))
        if not sep or not dotted.strip() or any(not part for part in key):
            raise RecipeError(f"--set {text!r}: expected a.b.c=value")
        parsed.append((key, _parse_override_value(key, raw, source.data), Location(f"--set {text}", 0, 0)))
    return parsed


def apply_parsed(source: RecipeSource, parsed: Iterable[Override]) -> RecipeSource:
    data = source.data
    marks = dict(source.marks)
    for key, value, where in parsed:
        data = deep_merge(data, _nest(key, value))
        for n in range(1, len(key) + 1):
            marks[key[:n]] = where
    return RecipeSource(source.path, data, marks)


def apply_overrides(source: RecipeSource, overrides: Iterable[str]) -> RecipeSource:
    """Apply ``--set a.b=value`` overrides; values are parsed as YAML, strings kept for string fields."""
    return apply_parsed(source, parse_overrides(source, overrides))


MAX_SWEEP_JOBS = 1000


def expand_sweeps(specs: Iterable[str]) -> list[list[str]]:
    """``--sweep a.b=1,2 --sweep c=x,y`` → the grid of ``--set`` lists, one per job (first key slowest).

    Each value is read exactly as ``--set`` reads it, so a value cannot itself contain a comma.
    """
    grid: list[list[str]] = [[]]
    for text in specs:
        dotted, sep, raw = text.partition("=")
        values = [v.strip() for v in raw.split(",")]
        if not sep or not dotted.strip() or any(not v for v in values):
            raise RecipeError(f"--sweep {text!r}: expected a.b.c=value1,value2,...")
        grid = [[*point, f"{dotted.strip()}={v}"] for point in grid for v in values]
        if len(grid) > MAX_SWEEP_JOBS:
            raise RecipeError(f"--sweep: {len(grid)} jobs or more; at most {MAX_SWEEP_JOBS} in one submit")
    return grid


def _nest(key: Key, value: Any) -> dict[str, Any]:
    nested: dict[str, Any] = {key[-1]: value}
    for part in reversed(key[:-1]):
        nested = {part: nested}
    return nested


def _parse_override_value(key: Key, raw: str, data: Mapping[str, Any]) -> Any:
    if _field_is_string(key, data):
        return raw
    if not raw.strip():
        return None
    safeyaml.check_budget(raw, f"--set {'.'.join(key)}", RecipeError, syntax=False)
    try:
        return yaml.load(raw, Loader=_loader_class())
    except (yaml.YAMLError, ValueError, TypeError, OverflowError):  # 2024-13-45 is a ValueError
        return raw


def _field_is_string(key: Key, data: Mapping[str, Any]) -> bool:
    model: Any = Recipe
    parts = list(key)
    if parts and parts[0] == "algorithm":
        entry = data.get("entrypoint")
        model = algorithm_model(entry) if isinstance(entry, str) and entry in ENTRYPOINTS else None
        parts = parts[1:]
    for i, part in enumerate(parts):
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return False
        info = model.model_fields.get(part)
        if info is None:
            return False
        annotation = info.annotation
        if i == len(parts) - 1:
            return _is_str_annotation(annotation)
        model = _unwrap_model(annotation)
    return False


def _is_str_annotation(annotation: Any) -> bool:
    if annotation is str:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args == [str]
    return False


def _unwrap_model(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [a for a in typing.get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        return models[0] if models else None
    return annotation


CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def check_controls(value: Any, key: Key, source: RecipeSource) -> None:
    """No control character (``\\n``, ``\\r``, ``\\0``, ...) in any name or value that can reach a script.

    Quoting does not make a newline safe in a comment or an ``#SBATCH`` line. Only descriptions (free text
    that no script carries) may span lines.
    """
    if isinstance(value, str):
        found = CONTROL_RE.search(value)
        if found and (not key or key[-1] != "description"):
            raise RecipeError(f"{source.where(key)}: {'.'.join(key)}: control character {found.group()!r} in "
                              "a value (values reach shell scripts; use plain single-line text)")
    elif isinstance(value, dict):
        for name, item in value.items():
            check_controls(str(name), (*key, str(name)) if not CONTROL_RE.search(str(name)) else key, source)
            check_controls(item, (*key, str(name)), source)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_controls(item, (*key, str(i)), source)


def validate_source(source: RecipeSource) -> Recipe:
    """Validate raw data into a :class:`Recipe` (its ``algorithm:`` typed by the entrypoint's model); the
    first problem becomes a one-line RecipeError."""
    check_controls(source.data, (), source)
    try:
        return Recipe.model_validate(source.data)
    except ValidationError as exc:
        raise _as_recipe_error(exc, source) from None


def load_recipe(path: str | Path, overrides: Iterable[str] = ()) -> tuple[Recipe, RecipeSource]:
    source = apply_overrides(load_source(path), overrides)
    return validate_source(source), source


def _as_recipe_error(exc: ValidationError, source: RecipeSource) -> RecipeError:
    """One line for the first error (``(+N more)`` when there are more); ``error.lines`` holds one per error,
    which ``gputrain validate`` prints in full."""
    errors = exc.errors()
    # An unknown key often causes a "missing" error for the field it misspells; the unknown key (with its
    # "did you mean" hint) is the one worth showing.
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    lines = [_error_line(e, source) for e in [first, *(e for e in errors if e is not first)]]
    more = f" (+{len(errors) - 1} more: `gputrain validate` lists them)" if len(errors) > 1 else ""
    error = RecipeError(f"{lines[0]}{more}")
    error.lines = tuple(lines)
    return error


def _error_line(error: Any, source: RecipeSource) -> str:
    key = tuple(str(p) for p in error["loc"] if p != "[key]")  # a refused dict key: at its own line
    model: type[BaseModel] = Recipe
    loc = key
    entry = source.data.get("entrypoint")
    if key[:1] == ("algorithm",) and len(key) > 1 and isinstance(entry, str) and entry in ENTRYPOINTS:
        model, loc = algorithm_model(entry), key[1:]  # "did you mean" among the entrypoint's own fields
    dotted = ".".join(key) or "(recipe)"
    if error["type"] == "extra_forbidden":
        hint = _did_you_mean(model, loc, key[:-1])
        message = f"unknown key {dotted!r}{hint}"
    elif error["type"] == "missing":
        message = f"missing required field {dotted!r}"
    else:
        message = f"{dotted}: {error['msg']}"
        if "input" in error and not isinstance(error["input"], dict | list):
            got = f"(got {error['input']!r})"
            message += "" if got in message else f" {got}"
    return f"{source.where(key)}: {message}"


def _did_you_mean(model: type[BaseModel], loc: Key, prefix: Key = ()) -> str:
    """The closest field name, spelled in full (``train.batch_size``: what ``--set`` takes), else the allowed
    names."""
    current: Any = model
    for part in loc[:-1]:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return ""
        info = current.model_fields.get(part)
        current = _unwrap_model(info.annotation) if info else None
    if not (isinstance(current, type) and issubclass(current, BaseModel)):
        return ""
    close = difflib.get_close_matches(loc[-1], list(current.model_fields), n=1, cutoff=0.6)
    if close:
        return f"; did you mean {'.'.join((*prefix, close[0]))!r}?"
    return f"; allowed: {', '.join(current.model_fields)}"
