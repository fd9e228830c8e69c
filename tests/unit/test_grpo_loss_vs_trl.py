"""The GRPO loss equals TRL 1.16's on identical inputs, for every loss type, with and without the KL term.

How: one tiny Qwen2 (random init, local tokenizer) is copied; TRL's real ``GRPOTrainer`` is built around
one copy and its ``_compute_loss`` is called on a hand-made batch (prompt/completion ids and masks,
advantages, old and reference log-probs chosen so that ratios get clipped on both sides); our
``completion_logprobs`` + ``grpo_loss`` run on the other copy. Loss values and gradients must match.
TRL is a test dependency only.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

from gputrain.recipe.schema import ModelSpec  # noqa: E402
from gputrain.train.grpo.loss import completion_logprobs, grpo_loss  # noqa: E402
from gputrain.train.grpo.policy import build_model, train_tiny_tokenizer  # noqa: E402

CORPUS = ["def add(a, b):\n    return a + b\n", "assert add(1, 2) == 3\n", "def neg(x):\n    return -x\n"] * 4
TEMPERATURE = 0.7
MAX_COMPLETION = 6


@pytest.fixture(scope="module")
def tiny() -> tuple[object, object]:
    tok = train_tiny_tokenizer(CORPUS, vocab_size=300)
    model = build_model(ModelSpec(name="tiny-qwen2", hidden_size=32, num_layers=2, num_heads=2), tok, seed=3)
    return model, tok


def _batch(tok: object, vocab: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    b = 4
    prompt_ids = torch.randint(2, vocab, (b, 5), generator=g)
    prompt_mask = torch.ones(b, 5, dtype=torch.long)
    prompt_mask[1, :2] = 0  # left padding
    prompt_ids[1, :2] = tok.pad_token_id  # type: ignore[attr-defined]
    completion_ids = torch.randint(2, vocab, (b, MAX_COMPLETION), generator=g)
    completion_mask = torch.ones(b, MAX_COMPLETION, dtype=torch.long)
    completion_mask[0, 4:] = 0
    completion_mask[2, 2:] = 0
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.tensor([1.2, -0.7, 0.4, -1.5]),
    }


def _trl_trainer(
    model: object, tok: object, loss_type: str, beta: float, tmp_path: object, correction: bool = True
) -> object:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        loss_type=loss_type,
        beta=beta,
        use_bias_correction_kl=correction,
        epsilon=0.2,
        epsilon_high=0.28,
        temperature=TEMPERATURE,
        max_completion_length=MAX_COMPLETION,
        num_generations=4,
        per_device_train_batch_size=4,
        report_to=[],
    )
    # With beta > 0 TRL loads its reference from the model's name: give it a saved copy of the same weights.
    model.save_pretrained(str(tmp_path / "tiny"))  # type: ignore[attr-defined,operator]
    tok.save_pretrained(str(tmp_path / "tiny"))  # type: ignore[attr-defined]
    trainer = GRPOTrainer(
        model=str(tmp_path / "tiny"),
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["def add(a, b):"] * 4}),
        processing_class=tok,
    )
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    return trainer


@pytest.fixture(scope="module")
def trainers(tiny: tuple, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One real TRL trainer per loss type (built with beta > 0 so it holds a reference model)."""
    base, tok = tiny
    built: dict[str, object] = {}

    def get(loss_type: str) -> Any:
        if loss_type not in built:
            tmp = tmp_path_factory.mktemp(loss_type)
            built[loss_type] = _trl_trainer(copy.deepcopy(base), tok, loss_type, 0.04, tmp)
        return built[loss_type]

    return get


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize(("beta", "correction"), [(0.0, True), (0.04, True), (0.04, False)])
def test_loss_and_gradients_match_trl(
    tiny: tuple, trainers: Any, loss_type: str, beta: float, correction: bool
) -> None:
    base, tok = tiny
    ours, theirs = copy.deepcopy(base), copy.deepcopy(base)
    ours.train()
    batch = _batch(tok, len(tok))
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        current = completion_logprobs(ours, ids, attn, MAX_COMPLETION, TEMPERATURE)
    shift = torch.linspace(-0.5, 0.5, current.numel()).view_as(current)
    old = current + shift  # ratios from e^-0.5 to e^0.5: clipped low and high
    ref = current - shift.flip(-1) * 0.3

    trainer = trainers(loss_type)
    trainer.model.load_state_dict(theirs.state_dict())
    trainer.model.zero_grad(set_to_none=True)
    trainer.beta = beta  # read at call time by _compute_loss
    trainer.args.use_bias_correction_kl = correction
    inputs = dict(batch, old_per_token_logps=old, ref_per_token_logps=ref, num_items_in_batch=attn[:, 5:].sum())
    trl_loss = trainer._compute_loss(trainer.model, inputs)
    trl_loss.backward()

    logps = completion_logprobs(ours, ids, attn, MAX_COMPLETION, TEMPERATURE)
    out = grpo_loss(
        logps,
        batch["advantages"],
        batch["completion_mask"],
        old_logps=old,
        ref_logps=ref if beta else None,
        loss_type=loss_type,
        beta=beta,
        kl_ratio_correction=correction,
        epsilon_low=0.2,
        epsilon_high=0.28,
        max_completion_length=MAX_COMPLETION,
    )
    out.loss.backward()

    assert out.clip_ratio > 0, "the batch was built to clip some ratios"
    assert out.loss.item() == pytest.approx(trl_loss.item(), rel=1e-5, abs=1e-7)
    theirs_params = dict(trainer.model.named_parameters())
    compared = 0
    for name, p in ours.named_parameters():
        q = theirs_params[name]
        assert p.grad is not None and q.grad is not None, name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-7)
        compared += 1
    assert compared > 5


def test_logprobs_match_trl_fused_head(tiny: tuple, tmp_path: object) -> None:
    """Our log-probs (temperature-scaled) equal the ones TRL's trainer scores completions with."""
    base, tok = tiny
    ours, theirs = copy.deepcopy(base), copy.deepcopy(base)
    batch = _batch(tok, len(tok))
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    trainer = _trl_trainer(theirs, tok, "dapo", 0.0, tmp_path)
    with torch.no_grad():
        theirs_lp, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attn, MAX_COMPLETION)
        ours_lp = completion_logprobs(ours, ids, attn, MAX_COMPLETION, TEMPERATURE)
    mask = batch["completion_mask"].bool()
    torch.testing.assert_close(ours_lp[mask], theirs_lp[mask], rtol=1e-5, atol=1e-5)


def test_unknown_loss_type_is_refused() -> None:
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="loss_type"):
        grpo_loss(x, torch.zeros(1), torch.ones(1, 2), loss_type="nope")
