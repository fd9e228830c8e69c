import json
from pathlib import Path

import pytest

from gputrain.errors import GputrainError
from gputrain.recipe.algorithms.diffusion import DiffusionAlgorithm
from gputrain.train.diffusion.data import ByteTokenizer, final_answer, generate_problems, load_gsm8k, plan_of


def test_generator_is_seeded_and_gsm8k_shaped() -> None:
    a, b = generate_problems(20, seed=1), generate_problems(20, seed=1)
    assert a == b and a != generate_problems(20, seed=2)
    for row in a:
        answer = final_answer(row["answer"])
        assert answer is not None and row["answer"].rstrip().endswith(f"#### {answer}")
        # the annotations compute the answer: the last one ends in it
        assert plan_of(row["answer"]).endswith(f"={answer}")


def test_byte_tokenizer_round_trips() -> None:
    tok = ByteTokenizer()
    text = "Ava has 3+4=7 apples – ünïcode"
    assert tok.decode(tok.encode(text)) == text
    assert tok.mask_id == tok.vocab_size - 1 and tok.eos_id < tok.mask_id


@pytest.mark.parametrize("suffix", ["json", "jsonl"])
def test_local_files_load(tmp_path: Path, suffix: str) -> None:
    rows = generate_problems(3, seed=0)
    path = tmp_path / f"gsm.{suffix}"
    path.write_text(json.dumps(rows) if suffix == "json" else "".join(json.dumps(r) + "\n" for r in rows))
    assert load_gsm8k(str(path), "train") == rows


def test_parquet_loads(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = generate_problems(3, seed=0)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "gsm.parquet")
    assert load_gsm8k(str(tmp_path / "gsm.parquet"), "train") == rows


def test_rows_without_answer_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "q"}) + "\n")
    with pytest.raises(GputrainError, match="row 0 lacks"):
        load_gsm8k(str(path), "train")


def test_algorithm_settings_are_strict() -> None:
    assert DiffusionAlgorithm().hdp_length == 512
    with pytest.raises(ValueError, match="extra"):
        DiffusionAlgorithm.model_validate({"blok_size": 4})
    with pytest.raises(ValueError, match="clip_beta"):
        DiffusionAlgorithm(clip_beta=0.8, clip_omega=0.5)
    with pytest.raises(ValueError, match="exec_block"):
        DiffusionAlgorithm(exec_len=256, exec_block=100)


def test_bad_settings_become_one_line_errors() -> None:
    from gputrain.recipe.schema import ModelSpec
    from gputrain.train.bd3lm import bd3lm_task
    from gputrain.train.hdp import hdp_task

    with pytest.raises(GputrainError, match="model.seq_len 30 is not a multiple of algorithm.block_size 4"):
        bd3lm_task(DiffusionAlgorithm(block_size=4), ModelSpec(name="dit", seq_len=30))
    with pytest.raises(GputrainError, match="model.seq_len is not set"):
        bd3lm_task(DiffusionAlgorithm(block_size=4), ModelSpec(name="dit"))
    with pytest.raises(GputrainError, match="differs from question_len"):
        hdp_task(DiffusionAlgorithm(), ModelSpec(name="dit", seq_len=100))


@pytest.mark.parametrize(("name", "content"), [("bad.parquet", b"not parquet"), ("bad.json", b"5"),
                                               ("bad.jsonl", b"{oops\n")])
def test_unreadable_local_files_are_one_line_errors(tmp_path: Path, name: str, content: bytes) -> None:
    if name.endswith("parquet"):
        pytest.importorskip("pyarrow")
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(GputrainError, match=f"data.source {path}: (cannot read|expected a list)"):
        load_gsm8k(str(path), "train")
