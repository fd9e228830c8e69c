"""The RL policy leaves the job as a ``save_pretrained`` folder transformers loads as is (issue 29).

Round trip on the tiny Qwen2 the CPU profiles train: export, load with the Auto classes only (no gputrain),
same logits and the same greedy completion of a chat-formatted prompt; the chat template travels along.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gputrain.recipe.schema import ModelSpec
from gputrain.train.grpo.export import export_policy
from gputrain.train.grpo.policy import build_model, train_tiny_tokenizer

pytestmark = pytest.mark.slow  # loads transformers twice: ~10 s quiet, a minute on the shared machine

CORPUS = ["Question: What is 3 + 4?\nAnswer (end with #### and the number):", "3 + 4 = 7\n#### 7"] * 4


def test_exported_policy_loads_with_transformers_and_gives_the_same_numbers(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = train_tiny_tokenizer(CORPUS, vocab_size=96)
    model = build_model(ModelSpec(name="tiny-qwen2", hidden_size=32, num_layers=2, num_heads=4, seq_len=64), tok)
    with torch.no_grad():
        for p in model.parameters():  # trained-looking weights, not the init
            p.add_(0.05 * torch.randn_like(p))
    out = export_policy(model, tok, tmp_path, is_main=True)
    assert out == tmp_path / "model" and (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    assert not (tmp_path / ".model.tmp").exists()

    loaded = AutoModelForCausalLM.from_pretrained(out).eval()
    tok2 = AutoTokenizer.from_pretrained(out)
    assert tok2.chat_template == tok.chat_template
    text = tok2.apply_chat_template([{"role": "user", "content": CORPUS[0]}], tokenize=False,
                                    add_generation_prompt=True)
    ids = tok2(text, return_tensors="pt", add_special_tokens=False)
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(**ids).logits, loaded(**ids).logits)
        a = model.generate(**ids, max_new_tokens=8, do_sample=False)
        b = loaded.generate(**ids, max_new_tokens=8, do_sample=False)
    assert torch.equal(a, b)
    assert loaded.generation_config.eos_token_id == model.generation_config.eos_token_id
