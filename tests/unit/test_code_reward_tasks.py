"""Loading MBPP (json, jsonl, parquet) and HumanEval; bad files give one-line errors naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputrain.errors import GputrainError
from gputrain.train.code_reward import SAMPLE_MBPP, load_humaneval, load_mbpp, normalize_task

ROWS = [json.loads(line) for line in SAMPLE_MBPP.read_text().splitlines()]


def test_sample_is_in_mbpp_hf_format() -> None:
    assert len(ROWS) >= 10
    for row in ROWS:
        assert {"task_id", "text", "code", "test_list", "test_setup_code"} <= set(row)
        assert len(row["test_list"]) == 3


def test_json_jsonl_and_parquet_give_the_same_tasks(tmp_path: Path) -> None:
    (tmp_path / "m.json").write_text(json.dumps(ROWS))
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "m.parquet")
    expected = load_mbpp(SAMPLE_MBPP)
    assert load_mbpp(tmp_path / "m.json") == expected
    assert load_mbpp(tmp_path / "m.parquet") == expected
    assert expected[0]["tests"] == ROWS[0]["test_list"]
    assert expected[0]["reference"] == ROWS[0]["code"]
    assert expected[0]["shown_test"] == ROWS[0]["test_list"][0]
    assert any(t["setup_code"] for t in expected)
    assert len(load_mbpp(SAMPLE_MBPP, limit=3)) == 3


def test_bad_files_name_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROWS[0]) + "\n{oops\n")
    with pytest.raises(GputrainError, match=r"bad.jsonl:2: not valid JSON"):
        load_mbpp(bad)
    missing = tmp_path / "m.jsonl"
    missing.write_text(json.dumps({"text": "x", "test_list": []}) + "\n")
    with pytest.raises(GputrainError, match=r"m.jsonl: row 1: needs a non-empty 'test_list'"):
        load_mbpp(missing)
    with pytest.raises(GputrainError, match="no such file"):
        load_mbpp(tmp_path / "nothere.jsonl")
    odd = tmp_path / "m.csv"
    odd.write_text("a,b\n")
    with pytest.raises(GputrainError, match="cannot tell the format"):
        load_mbpp(odd)


def test_normalize_accepts_raw_mbpp_rows_and_is_idempotent() -> None:
    task = normalize_task(ROWS[0])
    assert normalize_task(dict(task)) == task


def test_humaneval_ships_164_offline_problems() -> None:
    tasks = load_humaneval()
    assert len(tasks) == 164
    first = tasks[0]
    assert first["task_id"] == "HumanEval/0"
    assert first["prompt_code"] and first["judge_prelude"] == first["prompt_code"]
    assert first["tests"][0].rstrip().endswith("check(has_close_elements)")
