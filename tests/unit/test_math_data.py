"""Math data: the three hub layouts from local JSON/JSONL/Parquet, generated arithmetic, and bad sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputrain.errors import RecipeError
from gputrain.recipe.schema import DataSpec
from gputrain.train.math_rl.arithmetic import generate_problems
from gputrain.train.math_rl.data import load_math_rows, read_records, to_row
from gputrain.train.math_rl.rewards import MathScorer

GSM8K = [{"question": f"Q{i}: 2 + {i}?", "answer": f"2 + {i} = {2 + i}\n#### {2 + i}"} for i in range(20)]
MATH = [
    {"problem": f"P{i}", "solution": f"so $\\boxed{{{i}}}$", "level": f"Level {i % 5 + 1}", "type": "Algebra"}
    for i in range(20)
]
DEEPSCALER = [{"problem": f"D{i}", "solution": "long", "answer": f"\\frac{{{i}}}{{7}}"} for i in range(20)]


def test_rows_of_each_layout_carry_the_reference_answer_and_style() -> None:
    g, m, d = to_row(GSM8K[3]), to_row(MATH[2]), to_row(DEEPSCALER[4])
    assert (g["dataset"], g["answer"], g["style"]) == ("gsm8k", "5", "gsm8k")
    assert g["prompt"].startswith("Question: Q3: 2 + 3?") and "####" in g["prompt"]
    assert (m["dataset"], m["answer"], m["level"], m["type"], m["style"]) == (
        "math",
        "2",
        3,
        "Algebra",
        "boxed",
    )
    assert (d["dataset"], d["answer"], d["style"]) == ("deepscaler", "\\frac{4}{7}", "boxed")
    assert "\\boxed{}" in d["prompt"]


@pytest.mark.parametrize("fmt", ["json", "jsonl", "parquet"])
def test_local_files_in_every_format(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"train.{fmt}"
    if fmt == "json":
        path.write_text(json.dumps(MATH))
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in MATH))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(MATH), path)
    train, held = load_math_rows(DataSpec(source=str(path), val_size=4), seed=0, eval_size=64)
    assert len(train) == 16 and len(held) == 4
    assert {r["problem"] for r in train}.isdisjoint(r["problem"] for r in held)
    assert all(r["answer"] == r["problem"][1:] for r in train + held)  # P7 -> "7"
    assert read_records(str(tmp_path), split="train") == MATH  # a folder: train* files


def test_json_in_column_layout(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps({k: [r[k] for r in DEEPSCALER] for k in DEEPSCALER[0]}))
    assert read_records(str(path)) == DEEPSCALER


def test_generated_problems_are_seeded_gsm8k_format_and_their_answers_are_right() -> None:
    a, b = generate_problems(50, seed=3), generate_problems(50, seed=3)
    assert a == b and a != generate_problems(50, seed=4)
    scorer = MathScorer(["correctness", "format", "integer"])
    rows = [to_row(r, "arithmetic") for r in a]
    solutions = [r["solution"] for r in rows]
    assert scorer(solutions, rows) == [[1.0, 1.0, 1.0]] * 50  # the reference solution earns every reward
    for r in a:
        work = r["answer"].split("\n")[0]
        assert eval(work.split("=")[0]) == int(r["answer"].split("#### ")[1])


def test_generated_source_gives_train_and_eval_rows() -> None:
    train, held = load_math_rows(DataSpec(source="generated", train_size=40), seed=0, eval_size=8)
    assert (len(train), len(held)) == (40, 8)
    assert all(r["dataset"] == "arithmetic" and r["answer"].lstrip("-").isdigit() for r in train)


def test_bad_sources_are_one_line_recipe_errors(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="file not found"):
        read_records(str(tmp_path / "missing.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(RecipeError, match="cannot read as jsonl"):
        read_records(str(bad))
    cols = tmp_path / "cols.jsonl"
    cols.write_text(json.dumps({"text": "x"}) + "\n")
    with pytest.raises(RecipeError, match="unrecognised columns"):
        load_math_rows(DataSpec(source=str(cols)), seed=0, eval_size=1)
    with pytest.raises(RecipeError, match="no train"):
        read_records(str(tmp_path / ".."), split="train")
