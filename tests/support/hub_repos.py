"""A tiny model repository and a tiny MBPP-shaped dataset repository, written by the real libraries.

The local hub server (:mod:`tests.support.hub_server`) serves folders as repositories; these build them:
``tiny_model_repo`` saves a 2-layer Qwen2 and a byte-level BPE tokenizer fitted to MBPP text with
``save_pretrained`` (what a hub model repository holds: ``config.json``, ``generation_config.json``,
``model.safetensors``, ``tokenizer.json``, ``tokenizer_config.json``), plus a ``pytorch_model.bin`` and a
``README.md`` that a training never loads (``prepare`` must skip them). ``tiny_mbpp_repo`` writes the
bundled MBPP sample as ``data/{train,test}-00000-of-00001.parquet`` with ``datasets`` (the layout hub
dataset repositories use). Run as a script to write both under a folder::

    python -m tests.support.hub_repos /tmp/hub-repos
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gputrain.train.code_reward.tasks import SAMPLE_MBPP

MODEL_REPO = "tiny-org/tiny-coder"
DATASET_REPO = "tiny-org/tiny-mbpp"


def _mbpp_rows() -> list[dict[str, object]]:
    return [json.loads(line) for line in SAMPLE_MBPP.read_text(encoding="utf-8").splitlines() if line.strip()]


def tiny_model_repo(folder: Path) -> Path:
    """Save a tiny Qwen2 causal LM and its tokenizer into ``folder`` as a hub model repository holds them."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    corpus = [f"{r['text']}\n{r['code']}\n" + "\n".join(r["test_list"]) for r in _mbpp_rows()]  # type: ignore[operator]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|pad|>", "<|endoftext|>"],
                                                         show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|endoftext|>")
    fast.save_pretrained(folder)
    config = Qwen2Config(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                         tie_word_embeddings=True, pad_token_id=fast.pad_token_id, eos_token_id=fast.eos_token_id,
                         bos_token_id=fast.eos_token_id)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(folder)  # config.json, generation_config.json, model.safetensors
    torch.save(model.state_dict(), folder / "pytorch_model.bin")  # a duplicate format nobody should fetch
    (folder / "README.md").write_text("# tiny-coder\n\nA 2-layer Qwen2 for gputrain's tests.\n")
    return folder


def tiny_mbpp_repo(folder: Path) -> Path:
    """Write the bundled MBPP sample as a hub dataset repository (parquet train/test splits)."""
    import datasets

    rows = _mbpp_rows()
    cut = max(1, len(rows) * 2 // 3)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    for split, part in (("train", rows[:cut]), ("test", rows[cut:])):
        datasets.Dataset.from_list(part).to_parquet(str(folder / "data" / f"{split}-00000-of-00001.parquet"))
    (folder / "README.md").write_text("# tiny-mbpp\n\nMBPP rows for gputrain's tests.\n")
    return folder


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "hub-repos")
    print(tiny_model_repo(out / "models" / MODEL_REPO))
    print(tiny_mbpp_repo(out / "datasets" / DATASET_REPO))
