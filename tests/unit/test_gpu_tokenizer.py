"""benchmarks/gpu_tokenizer.py: GPT-2 merges recovered from tiktoken ranks give the same tokens as the ranks."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_built_tokenizer_loads_offline_and_applies_the_merges(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    tokens = [bytes([b]) for b in range(256)] + [b"he", b"ll", b"hell", b"hello", b" w", b"or", b" wor", b"ld",
                                             b" world"]
    ranks = tmp_path / "tiny.tiktoken"
    ranks.write_bytes(b"".join(base64.b64encode(t) + b" " + str(i).encode() + b"\n" for i, t in enumerate(tokens)))
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_tokenizer.py"), str(ranks),
                          str(tmp_path / "hf")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ok", "266", "9"]
    snap = next((tmp_path / "hf" / "hub" / "models--gpt2" / "snapshots").iterdir())
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(snap / "tokenizer.json"))
    assert tok("hello world")["input_ids"] == [259, 264]
    assert tok.convert_tokens_to_ids("<|endoftext|>") == 265
