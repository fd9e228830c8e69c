"""Our advantages equal TRL 1.16's GRPOTrainer's on identical rewards (its real scoring path, not a copy).

TRL's reward functions read the rewards from dataset columns, so both sides see exactly the same numbers;
the trainer's own ``_generate_and_score_completions`` then computes the advantages we compare against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from gputrain.train.grpo.advantages import compute_advantages

trl = pytest.importorskip("trl")

GROUP = 4
NAN = float("nan")
# 3 prompts × 4 completions × 3 components: binary, graded, and a component with unscored (NaN) rows;
# row 11 is unscored by every component.
REWARDS = [
    [1.0, 0.5, 0.0], [0.0, 0.25, 1.0], [1.0, 0.5, NAN], [0.0, 0.0, 1.0],
    [0.0, 0.9, 0.0], [0.0, 0.1, 0.0], [1.0, 0.3, 1.0], [1.0, 0.7, 0.0],
    [1.0, 1.0, 1.0], [1.0, 0.0, 1.0], [0.0, 0.6, NAN], [NAN, NAN, NAN],
]  # fmt: skip
WEIGHTS = [1.0, 0.5, 2.0]


def _tiny_model_and_tokenizer() -> tuple[Any, Any]:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2} | {c: 3 + i for i, c in enumerate("abcdefgh")}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()  # type: ignore[assignment]
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    cfg = Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=1,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg), tok


def _column(k: int) -> Any:
    def reward(completions: list[str], **kwargs: Any) -> list[float | None]:
        return [None if v != v else v for v in kwargs[f"r{k}"]]  # NaN -> None: TRL's "not scored"

    reward.__name__ = f"r{k}"
    return reward


def _trl_advantages(tmp_path: Path, aggregation: str, scale_rewards: str) -> torch.Tensor:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model, tok = _tiny_model_and_tokenizer()
    columns = {f"r{k}": [row[k] for row in REWARDS] for k in range(3)}
    dataset = Dataset.from_dict({"prompt": ["a b"] * len(REWARDS), **columns})
    args = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        num_generations=GROUP,
        per_device_train_batch_size=len(REWARDS),
        max_completion_length=2,
        multi_objective_aggregation=aggregation,
        scale_rewards=scale_rewards,
        reward_weights=WEIGHTS,
        bf16=False,
        gradient_checkpointing=False,
        report_to=[],
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[_column(k) for k in range(3)],
        args=args,
        train_dataset=dataset,
        processing_class=tok,
    )
    inputs = [dict(row) for row in dataset]
    return trainer._generate_and_score_completions(inputs)["advantages"].detach().cpu()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("aggregation", "scale_rewards"),
    [
        ("sum_then_normalize", "group"),
        ("sum_then_normalize", "batch"),
        ("sum_then_normalize", "none"),
        ("normalize_then_sum", "group"),
    ],
)
def test_matches_trl_grpo_trainer(tmp_path: Path, aggregation: str, scale_rewards: str) -> None:
    expected = _trl_advantages(tmp_path, aggregation, scale_rewards)
    ours = compute_advantages(
        torch.tensor(REWARDS), GROUP, WEIGHTS, aggregation=aggregation, scale_rewards=scale_rewards
    )
    assert expected.shape == ours.shape == (len(REWARDS),)
    assert expected.abs().max() > 0.5  # the case is not degenerate
    assert torch.allclose(ours, expected, atol=1e-5), (ours, expected)
