"""Math datasets as the rows the GRPO core samples: GSM8K, MATH, DeepScaleR, or generated arithmetic.

Accepted columns (the Hugging Face layouts): GSM8K ``question``/``answer`` (answer ends ``#### n``); MATH
``problem``/``solution``/``level``/``type`` (answer in the solution's ``\\boxed{}``); DeepScaleR
``problem``/``solution``/``answer``. ``data.source`` is ``generated``, a local ``.json``/``.jsonl``/
``.parquet`` file (or a folder holding ``<split>*.<ext>``), or a hub name (``openai/gsm8k``, optionally
``name:config``) when online. Every row becomes ``{prompt, problem, answer, solution, level, type,
dataset, style}`` with ``answer`` the reference final answer.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

from gputrain.errors import RecipeError
from gputrain.recipe.schema import DataSpec
from gputrain.train.math_rl.answers import gold_answer
from gputrain.train.math_rl.arithmetic import generate_problems

Row = dict[str, Any]
GSM8K_PROMPT = "Question: {problem}\nAnswer (end with #### and the number):"
BOXED_PROMPT = "Problem: {problem}\nSolve it and put the final answer in \\boxed{{}}.\nSolution:"
HUB_CONFIGS = {"openai/gsm8k": "main", "gsm8k": "main"}
_SUFFIXES = {".json": "json", ".jsonl": "jsonl", ".parquet": "parquet"}


def detect_dataset(columns: set[str]) -> str:
    """``gsm8k``, ``math`` or ``deepscaler`` from a record's keys."""
    if {"question", "answer"} <= columns:
        return "gsm8k"
    if {"problem", "answer"} <= columns:
        return "deepscaler"
    if {"problem", "solution"} <= columns:
        return "math"
    raise RecipeError(
        f"data.source: unrecognised columns {sorted(columns)}; expected GSM8K (question, answer), "
        "MATH (problem, solution, level, type) or DeepScaleR (problem, solution, answer)"
    )


def _level(value: Any) -> int | None:
    found = re.search(r"\d", str(value)) if value is not None else None
    return int(found.group()) if found else None


def to_row(record: dict[str, Any], dataset: str | None = None, answer_format: str = "auto") -> Row:
    """One row; ``answer_format`` (``gsm8k``/``boxed``) overrides the dataset's own answer form, so the
    prompt asks for, and the format reward demands, the form the model's chat template asks for (Qwen2.5-Math's
    system turn says ``\\boxed{}`` also for GSM8K questions)."""
    kind = dataset or detect_dataset(set(record))
    problem = str(record["question"] if kind in ("gsm8k", "arithmetic") else record["problem"])
    native = "gsm8k" if kind in ("gsm8k", "arithmetic") else "boxed"
    style = native if answer_format == "auto" else answer_format
    template = GSM8K_PROMPT if style == "gsm8k" else BOXED_PROMPT
    solution = record.get("answer") if native == "gsm8k" else record.get("solution")
    return {
        "prompt": template.format(problem=problem),
        "problem": problem,
        "answer": gold_answer(None if kind == "math" else record.get("answer"), record.get("solution")),
        "solution": solution,
        "level": _level(record.get("level")),
        "type": record.get("type"),
        "dataset": kind,
        "style": style,
    }


def _read_file(path: Path, fmt: str) -> list[dict[str, Any]]:
    kind = _SUFFIXES.get(path.suffix.lower()) if fmt == "auto" else fmt
    try:
        if kind == "jsonl":
            lines = path.read_text(encoding="utf-8").splitlines()
            return [json.loads(line) for line in lines if line.strip()]
        if kind == "json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict):  # column layout {"question": [...], "answer": [...]}
                data = [dict(zip(data, values, strict=True)) for values in zip(*data.values(), strict=True)]
            return list(data)
        if kind == "parquet":
            import pyarrow.parquet as pq

            return list(pq.read_table(path).to_pylist())
    except (OSError, ValueError, TypeError) as exc:
        raise RecipeError(f"data.source {path}: cannot read as {kind}: {exc}") from exc
    raise RecipeError(f"data.source {path}: unknown format {kind!r}; use json, jsonl or parquet")


def _read_hub(name: str, split: str) -> list[dict[str, Any]]:
    repo, _, config = name.partition(":")
    try:
        from datasets import load_dataset

        ds = load_dataset(repo, config or HUB_CONFIGS.get(repo), split=split)
    except Exception as exc:  # offline, unknown name, gated: one line that names the source
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RecipeError(f"data.source {name!r}: no such local file and hub load failed: {reason}") from exc
    return [dict(r) for r in ds]


def read_records(source: str, fmt: str = "auto", split: str = "train") -> list[dict[str, Any]]:
    path = Path(source).expanduser()
    if path.is_dir():
        names = sorted(path.iterdir())
        files = [p for p in names if p.name.startswith(split) and p.suffix.lower() in _SUFFIXES]
        if not files:
            raise RecipeError(f"data.source {path}: no {split}*.json/.jsonl/.parquet file in the folder")
        return [r for f in files for r in _read_file(f, fmt)]
    if path.exists():
        return _read_file(path, fmt)
    if source.startswith((".", "/", "~")) or path.suffix.lower() in _SUFFIXES:
        raise RecipeError(f"data.source {source}: file not found")
    return _read_hub(source, split)


def load_math_rows(
    data: DataSpec, *, seed: int, eval_size: int, answer_format: str = "auto"
) -> tuple[list[Row], list[Row]]:
    """(train rows, held-out eval rows) from the recipe's ``data`` section.

    Eval rows are held out of the same source (``data.val_size``; unset: ``eval_size``, at most a fifth).
    A generated source draws them from the next seed; its problem space is small, so some may repeat a
    training problem (it measures learning on the task, not generalisation). ``data.train_size`` unset:
    every row (1024 generated problems); ``data.split`` unset: the train split.
    """
    source = data.source
    train_size, val_size = data.train_size, data.val_size
    n_val = val_size if val_size is not None else eval_size
    if source == "generated" or data.format == "generated":
        top = data.max_operand
        train = [to_row(r, "arithmetic", answer_format) for r in generate_problems(train_size or 1024, seed, top)]
        return train, [to_row(r, "arithmetic", answer_format) for r in generate_problems(n_val, seed + 1, top)]
    if data.max_operand is not None:
        raise RecipeError(f"data.max_operand sizes generated arithmetic; data.source {source!r} is read as it is: "
                          "remove data.max_operand")
    records = read_records(source, data.format, data.split or "train")
    if not records:
        raise RecipeError(f"data.source {source}: no records")
    kind = detect_dataset(set(records[0]))
    rows = [to_row(r, kind, answer_format) for r in records]
    rows = [r for r in rows if r["answer"]]  # a row without a reference answer cannot be rewarded
    random.Random(seed).shuffle(rows)
    n_val = min(n_val, len(rows) // 5)
    train, held_out = rows[n_val:], rows[:n_val]
    return (train[:train_size] if train_size else train), held_out
