"""Pieces of the GRPO core that need no process group: settings, batch arithmetic, masks, tokenizer, rollout."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gputrain.errors import GputrainError
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.schema import ModelSpec

torch = pytest.importorskip("torch")

from gputrain.train.grpo.rollout import completion_masks, generate, pick_engine  # noqa: E402
from gputrain.train.grpo.trainer import batch_sizes  # noqa: E402
from gputrain.train.runtime.schedule import lr_factor  # noqa: E402


def test_algorithm_forbids_unknown_keys_and_checks_batches() -> None:
    with pytest.raises(ValidationError, match="extra"):
        GRPOAlgorithm.model_validate({"num_generation": 8})
    with pytest.raises(ValidationError, match="multiple"):
        GRPOAlgorithm(train_batch_size=12, ppo_mini_batch_size=5)
    with pytest.raises(ValidationError, match="reward_weights"):
        GRPOAlgorithm(rewards=["a", "b"], reward_weights=[1.0])
    with pytest.raises(ValidationError):
        GRPOAlgorithm(num_generations=1)
    algo = GRPOAlgorithm(loss_type="dr_grpo", scale_rewards="batch", epsilon_high=0.28)
    assert (algo.loss_type, algo.scale_rewards, algo.epsilon_high) == ("dr_grpo", "batch", 0.28)


def test_batch_sizes_are_the_plans_and_checked_against_the_world() -> None:
    b200 = GRPOAlgorithm(train_batch_size=1024, ppo_mini_batch_size=128)
    assert batch_sizes(b200, world=4) == (1024, 128)
    with pytest.raises(GputrainError, match="multiples"):
        batch_sizes(GRPOAlgorithm(train_batch_size=6, ppo_mini_batch_size=3), world=4)
    with pytest.raises(GputrainError, match="plan the recipe again"):  # the trainer never redoes the sum
        batch_sizes(GRPOAlgorithm(num_generations=8), world=2)
    from gputrain.planner import make_plan
    from tests.conftest import RECIPES

    plan = make_plan(RECIPES / "grpo_code_mbpp.yaml", gpu="cpu", gpus_per_node=2, check_memory=False,
                     overrides=["algorithm.train_batch_size=null", "train.batch_size=8", "algorithm.num_generations=4"])
    assert batch_sizes(plan.recipe.algorithm, plan.world_size) == (4, 4)  # type: ignore[arg-type]  # 2 × 8 // 4


def test_completion_mask_stops_after_first_eos() -> None:
    ids = torch.tensor([[5, 6, 1, 7, 1], [5, 5, 5, 5, 5], [1, 9, 9, 9, 9]])
    mask, truncated = completion_masks(ids, eos_ids=1)
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    assert truncated.tolist() == [False, True, False]


def test_lr_schedule_warmup_then_cosine_to_zero() -> None:
    f = lr_factor("cosine", warmup=2, total=10)
    assert f(0) == pytest.approx(0.5) and f(1) == pytest.approx(1.0)
    assert f(2) == pytest.approx(1.0) and f(10) == pytest.approx(0.0, abs=1e-9)
    assert lr_factor("constant", 0, 10)(7) == 1.0


def test_auto_engine_is_hf_without_gpu_and_vllm_request_fails_cleanly() -> None:
    assert pick_engine("auto", torch.device("cpu"))[0] == "hf"
    assert pick_engine("hf", torch.device("cpu"))[0] == "hf"
    with pytest.raises(GputrainError, match="vLLM"):
        pick_engine("vllm", torch.device("cpu"))


def test_tiny_policy_generates_groups_with_masks() -> None:
    from gputrain.train.grpo.policy import build_model, train_tiny_tokenizer

    tok = train_tiny_tokenizer(["def f(x):\n    return x+1\n"] * 8, vocab_size=30)
    assert len(tok) <= 30 and tok.padding_side == "left"
    assert tok.decode(tok("return x+1\n")["input_ids"]) == "return x+1\n"
    model = build_model(ModelSpec(name="tiny-qwen2", hidden_size=32, num_layers=1, num_heads=2), tok)
    roll = generate(
        model,
        tok,
        ["def f(x):", "def f(x):\n    return"],
        max_prompt_length=32,
        max_new_tokens=5,
        temperature=1.0,
        device=torch.device("cpu"),
    )
    assert roll.completion_ids.shape[0] == 2 and roll.completion_ids.shape[1] <= 5
    assert roll.prompt_mask[0].tolist()[0] == 0  # the shorter prompt is left-padded
    assert len(roll.texts) == 2
    assert torch.all(roll.completion_ids[roll.completion_mask == 0] == tok.pad_token_id)


def _tiny_batch() -> tuple:
    from gputrain.train.grpo.policy import build_model, train_tiny_tokenizer

    tok = train_tiny_tokenizer(["def f(x):\n    return x+1\n"] * 8, vocab_size=30)
    model = build_model(ModelSpec(name="tiny-qwen2", hidden_size=32, num_layers=2, num_heads=2), tok, seed=5)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, len(tok), (4, 9), generator=g)
    attn = torch.ones_like(ids)
    mask = torch.ones(4, 4)
    mask[1, 2:] = 0
    mask[3, 1:] = 0
    return model, ids, attn, mask, torch.tensor([0.9, -0.3, 0.4, -1.0])


def _grads(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_micro_batches_accumulate_to_the_whole_batch_gradient(loss_type: str) -> None:
    """Two micro-batches of 2 give the gradient of one batch of 4 (dapo: token mean over the update)."""
    from gputrain.train.grpo.loss import completion_logprobs, grpo_loss

    model, ids, attn, mask, adv = _tiny_batch()
    even = mask.clone()
    even[:] = 1  # grpo/bnpo only average per micro-batch, which equals the whole when lengths match
    mask = mask if loss_type in ("dapo", "dr_grpo") else even
    common = {"loss_type": loss_type, "max_completion_length": 4}
    lp = completion_logprobs(model, ids, attn, 4)
    grpo_loss(lp, adv, mask, tokens_per_rank=float(mask.sum()), **common).loss.backward()
    whole = _grads(model)
    model.zero_grad()
    for sl in (slice(0, 2), slice(2, 4)):
        lp = completion_logprobs(model, ids[sl], attn[sl], 4)
        grpo_loss(lp, adv[sl], mask[sl], accum_steps=2, tokens_per_rank=float(mask.sum()), **common).loss.backward()
    torch.testing.assert_close(_grads(model), whole, rtol=1e-4, atol=1e-7)


def test_gradient_checkpointing_gives_the_same_gradient() -> None:
    import copy

    from gputrain.train.grpo.loss import completion_logprobs, grpo_loss
    from gputrain.train.grpo.policy import enable_gradient_checkpointing

    model, ids, attn, mask, adv = _tiny_batch()
    ckpt = copy.deepcopy(model)
    enable_gradient_checkpointing(ckpt)
    for m in (model, ckpt):
        m.train()
        grpo_loss(completion_logprobs(m, ids, attn, 4), adv, mask, loss_type="grpo").loss.backward()
    assert ckpt.model.gradient_checkpointing
    torch.testing.assert_close(_grads(ckpt), _grads(model), rtol=1e-5, atol=1e-7)


def test_compile_switch_is_skipped_on_cpu_and_leaves_the_model_usable() -> None:
    from gputrain.train.grpo.sharding import compile_layers

    model, ids, attn, _, _ = _tiny_batch()
    assert compile_layers(model, torch.device("cpu")) == "compile skipped: CPU run"
    assert hasattr(model, "generate") and model(input_ids=ids, attention_mask=attn).logits.shape[0] == 4
