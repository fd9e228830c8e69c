"""LoRA in the RL trainings (issue 29): adapters train, the base does not, the reference is the base, the export
merges (transformers loads it with no peft) and ships the adapters (peft loads them onto the base)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gputrain.recipe.schema import ModelSpec
from gputrain.train.grpo.export import export_policy
from gputrain.train.grpo.lora import AdapterOffReference, apply_lora, lora_config
from gputrain.train.grpo.loss import completion_logprobs
from gputrain.train.grpo.policy import build_model, train_tiny_tokenizer

pytestmark = pytest.mark.slow  # peft + transformers load and a save/load round trip: ~6 s quiet

CORPUS = ["Question: What is 3 + 4?\nAnswer:", "3 + 4 = 7\n#### 7"] * 4
SPEC = ModelSpec(name="tiny-qwen2", hidden_size=32, num_layers=2, num_heads=4, seq_len=64, lora_rank=4,
                 lora_alpha=8, lora_dropout=0.0, lora_target_modules=["q_proj", "v_proj", "down_proj"])


def test_recipe_fields_become_trls_lora_config() -> None:
    config = lora_config(SPEC)
    assert (config.r, config.lora_alpha, config.lora_dropout) == (4, 8, 0.0)
    assert set(config.target_modules) == {"q_proj", "v_proj", "down_proj"} and config.task_type == "CAUSAL_LM"
    assert lora_config(SPEC.model_copy(update={"lora_rank": None})) is None
    defaults = ModelSpec(name="x", lora_rank=16)  # TRL ModelConfig's defaults
    assert (defaults.lora_alpha, defaults.lora_dropout, defaults.lora_target_modules) == (32.0, 0.05, None)


def test_adapters_train_base_stays_reference_is_the_base_and_export_merges(tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    tok = train_tiny_tokenizer(CORPUS, vocab_size=96)
    base = build_model(SPEC, tok, seed=1)
    plain_base = {k: v.clone() for k, v in base.state_dict().items()}
    model = apply_lora(base, SPEC)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert len(trainable) == 2 * 3 * 2  # A and B, three targets, two layers
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    ref = AdapterOffReference(model)
    assert list(ref.parameters()) == [] and ref.state_dict() == {}  # no second copy of the weights

    ids = tok(CORPUS[0] + " 7", return_tensors="pt")
    input_ids, attn = ids["input_ids"], ids["attention_mask"]
    with torch.no_grad():
        before = completion_logprobs(model, input_ids, attn, 3)
        assert torch.equal(before, completion_logprobs(ref, input_ids, attn, 3))  # B = 0 at the start
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.05)
    assert {id(p) for g in opt.param_groups for p in g["params"]} == {
        id(p) for n, p in model.named_parameters() if "lora_" in n}
    model.train()
    for _ in range(3):
        loss = -completion_logprobs(model, input_ids, attn, 3).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    for n, p in model.named_parameters():
        if not p.requires_grad:
            assert torch.equal(p, frozen[n]), f"base weight {n} changed"
    with torch.no_grad():
        after = completion_logprobs(model, input_ids, attn, 3)
        reference = completion_logprobs(ref, input_ids, attn, 3)
        plain = build_model(SPEC.model_copy(update={"lora_rank": None}), tok, seed=1)
        plain.load_state_dict(plain_base)
        assert not torch.equal(after, before)  # the adapters learnt
        assert torch.equal(reference, completion_logprobs(plain.eval(), input_ids, attn, 3))  # ref = the base

    out = export_policy(model, tok, tmp_path, is_main=True)
    assert out == tmp_path / "model" and not list(tmp_path.glob(".*tmp"))
    assert not (out / "adapter_config.json").exists()  # a plain transformers folder: merged
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    assert not any("lora" in n for n, _ in merged.named_parameters())
    with torch.no_grad():
        got = completion_logprobs(merged, input_ids, attn, 3)
        assert torch.allclose(got, after, atol=1e-5), (got - after).abs().max()
        again = PeftModel.from_pretrained(plain, tmp_path / "adapter").eval()  # adapters alone, onto the base
        assert torch.equal(completion_logprobs(again, input_ids, attn, 3), after)


def test_lora_launches_for_the_rl_trainings_and_stays_plan_only_elsewhere() -> None:
    from gputrain.planner.resolve import make_plan
    from gputrain.recipe.plan_only import plan_only_fields

    recipes = Path(__file__).resolve().parents[2] / "recipes"
    for rl in ("grpo_math_fsdp.yaml", "gdpo_deepscaler.yaml", "grpo_code_mbpp.yaml"):
        plan = make_plan(recipes / rl, gpu="cpu", gpus_per_node=2, overrides=["model.lora_rank=8"])
        assert plan.recipe.model.lora_rank == 8 and plan_only_fields(plan.recipe) == [], rl
    other = make_plan(recipes / "selftest.yaml", gpu="cpu", overrides=["model.lora_rank=8"])
    assert plan_only_fields(other.recipe) == ["model.lora_rank"]


def test_planner_prices_no_reference_copy_under_lora() -> None:
    """The trainer's LoRA reference is the policy with adapters off: the plan holds no second set of weights."""
    from gputrain.planner.resolve import make_plan

    math = Path(__file__).resolve().parents[2] / "recipes" / "grpo_math_fsdp.yaml"
    full = make_plan(math, gpu="H100", check_memory=False).estimate.memory_breakdown
    lora = make_plan(math, gpu="H100", overrides=["model.lora_rank=16"], check_memory=False).estimate.memory_breakdown
    assert full["reference_model"] > 0 and "reference_model" not in lora
