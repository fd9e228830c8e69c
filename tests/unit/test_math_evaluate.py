"""Math evaluation: GSM8K accuracy, MATH accuracy per level, length, format rate, and the samples table."""

from __future__ import annotations

import json
from pathlib import Path

from gputrain.train.math_rl.data import to_row
from gputrain.train.math_rl.evaluate import SAMPLES_FILE, MathEvaluator


def _rows() -> list[dict]:
    gsm = [to_row({"question": f"1 + {i}?", "answer": f"#### {1 + i}"}) for i in range(4)]
    math = [
        to_row({"problem": f"p{i}", "solution": f"\\boxed{{{i}}}", "level": f"Level {lvl}", "type": "Alg"})
        for i, lvl in enumerate([1, 1, 2, 5])
    ]
    return gsm + math


def test_metrics_by_dataset_and_level_and_the_samples_table(tmp_path: Path) -> None:
    rows = _rows()
    completions = [
        "1 + 0 = 1\n#### 1",  # right
        "#### 3",  # wrong (truth 2)
        "the answer is 3",  # right number but no marker: not read, wrong, invalid format
        "#### 4 #### 4",  # right answer, two markers: correct but invalid format
        "\\boxed{0}",  # level 1 right
        "\\boxed{7}",  # level 1 wrong
        "\\boxed{2}",  # level 2 right
        "",  # level 5 wrong
    ]
    evaluator = MathEvaluator(tmp_path)
    metrics = evaluator(completions, rows)
    assert metrics["gsm8k_accuracy"] == 0.5
    assert metrics["math_accuracy"] == 0.5
    assert metrics["math_accuracy_level_1"] == 0.5
    assert metrics["math_accuracy_level_2"] == 1.0
    assert metrics["math_accuracy_level_5"] == 0.0
    assert "math_accuracy_level_3" not in metrics  # no level-3 rows: no made-up number
    assert metrics["accuracy"] == 4 / 8
    assert metrics["valid_format_rate"] == 5 / 8
    assert metrics["mean_length"] == sum(len(c.split()) for c in completions) / 8

    evaluator(completions[:2], rows[:2])
    lines = [json.loads(x) for x in (tmp_path / SAMPLES_FILE).read_text().splitlines()]
    assert len(lines) == 10 and [x["eval"] for x in lines] == [1] * 8 + [2] * 2
    first = lines[0]
    assert [first[k] for k in ("problem", "prediction", "truth", "correct")] == ["1 + 0?", "1", "1", True]
    assert lines[2]["prediction"] is None and lines[2]["correct"] is False
