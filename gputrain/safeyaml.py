"""YAML with a budget: bounded size, nesting and alias expansion, checked before anything is built.

A 572-byte document of nested aliases ("billion laughs") expands to gigabytes; a few hundred nested
brackets overflow Python's recursion and a hundred thousand crash the C composer. So the text is first
streamed through the parser's *events* (an iterative state machine, no recursion) and refused, with
``file:line:column``, when it is larger than :data:`MAX_BYTES`, nests deeper than :data:`MAX_DEPTH`
(counting what aliases pull in) or would expand to more than :data:`MAX_VALUES` values. Only then is it
composed into nodes. Recipes and cluster files are a few kilobytes: the limits are far above any real one.
"""

from __future__ import annotations

from typing import Any

import yaml

from gputrain.errors import GputrainError

MAX_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_VALUES = 100_000


def loader_class() -> type[yaml.SafeLoader]:
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _where(file: str, mark: Any) -> str:
    return f"{file}:{mark.line + 1}:{mark.column + 1}" if mark is not None else file


def check_budget(text: str, file: str, error: type[GputrainError], *, syntax: bool = True) -> None:
    """Raise ``error`` (one line, with the position) if the YAML in ``text`` is over any limit (and, with
    ``syntax``, if it is not valid YAML; without, a syntax error is left to the caller's own parse)."""
    if len(text) > MAX_BYTES:
        raise error(f"{file}: larger than {MAX_BYTES // 1024} KiB; not a recipe or cluster file")
    # Each open collection: [anchor, values so far, deepest nesting below it]
    stack: list[list[Any]] = [[None, 0, 0]]
    sizes: dict[str, tuple[int, int]] = {}  # anchor -> (values, depth) of what it names
    open_anchors: set[str] = set()
    try:
        for event in yaml.parse(text, Loader=loader_class()):
            if isinstance(event, yaml.CollectionStartEvent):
                if len(stack) > MAX_DEPTH:
                    raise error(f"{_where(file, event.start_mark)}: YAML nested deeper than {MAX_DEPTH} levels")
                if event.anchor:
                    open_anchors.add(event.anchor)
                stack.append([event.anchor, 1, 0])
            elif isinstance(event, yaml.CollectionEndEvent):
                anchor, values, depth = stack.pop()
                if anchor:
                    open_anchors.discard(anchor)
                    sizes[anchor] = (values, depth + 1)
                _add(stack, values, depth + 1, file, event, error)
            elif isinstance(event, yaml.ScalarEvent):
                if event.anchor:
                    sizes[event.anchor] = (1, 0)
                _add(stack, 1, 0, file, event, error)
            elif isinstance(event, yaml.AliasEvent):
                if event.anchor in open_anchors:
                    raise error(f"{_where(file, event.start_mark)}: recursive YAML alias *{event.anchor}")
                values, depth = sizes.get(event.anchor or "", (1, 0))
                if len(stack) - 1 + depth > MAX_DEPTH:
                    raise error(f"{_where(file, event.start_mark)}: alias *{event.anchor} nests the YAML deeper "
                                f"than {MAX_DEPTH} levels")
                _add(stack, values, depth, file, event, error)
    except yaml.MarkedYAMLError as exc:
        if syntax:
            mark = exc.problem_mark or exc.context_mark
            raise error(f"{_where(file, mark)}: invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        if syntax:
            raise error(f"{file}: invalid YAML: {str(exc).splitlines()[0] if str(exc) else 'unreadable'}") \
                from None


def _add(stack: list[list[Any]], values: int, depth: int, file: str, event: Any,
         error: type[GputrainError]) -> None:
    top = stack[-1]
    top[1] += values
    top[2] = max(top[2], depth)
    if top[1] > MAX_VALUES:
        raise error(f"{_where(file, event.start_mark)}: YAML expands to more than {MAX_VALUES} values "
                    "(aliases repeated inside aliases?)")


def compose(text: str, file: str, error: type[GputrainError]) -> yaml.Node | None:
    """The document's node tree, after :func:`check_budget`; syntax errors become one-line ``error``."""
    check_budget(text, file, error)
    try:
        return yaml.compose(text, Loader=loader_class())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise error(f"{_where(file, mark)}: invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise error(f"{file}: invalid YAML: {exc}") from None


def load(text: str, file: str, error: type[GputrainError]) -> Any:
    """Plain data (``safe_load``) within the budget."""
    check_budget(text, file, error)
    try:
        return yaml.load(text, Loader=loader_class())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise error(f"{_where(file, mark)}: invalid YAML: {exc.problem or exc.context}") from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise error(f"{file}: invalid YAML: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") \
            from None
