"""Numerics around the GRPO core (issue 16 #3-#5): exact zeros for groups without spread, unscored rows vs
single NaN components, per-reward statistics, the vLLM truncated IS weights as TRL computes them, the
entropy bonus, and the flags ``result.json`` raises when the summed reward rises for the wrong reason."""

from __future__ import annotations

import math

import torch

from gputrain.train.grpo.advantages import compute_advantages, reward_statistics
from gputrain.train.grpo.loss import grpo_loss, logprobs_and_entropy, truncated_is_weights
from gputrain.train.grpo.results import run_flags, run_result


def test_groups_without_spread_get_exactly_zero_under_gdpo_batch_scaling() -> None:
    # constant groups of 6 (a size whose float32 mean is inexact): nothing to learn from any of them. The
    # float32 version gave up to |1.43| here (random values, seed 0).
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        rewards = torch.rand(4, 2, generator=g).repeat_interleave(6, 0)
        for aggregation in ("normalize_then_sum", "sum_then_normalize"):
            for scale in ("group", "batch"):
                adv = compute_advantages(rewards, 6, aggregation=aggregation, scale_rewards=scale)
                assert torch.equal(adv, torch.zeros(24)), (aggregation, scale, adv.abs().max())


def test_a_constant_group_next_to_a_live_one_stays_exactly_zero() -> None:
    live = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]]
    flat = [[0.7, 0.3]] * 4
    adv = compute_advantages(torch.tensor(live + flat), 4, aggregation="normalize_then_sum")
    assert torch.equal(adv[4:], torch.zeros(4))
    assert adv[:4].abs().max() > 0.5


def test_statistics_keep_rows_with_one_unscored_component_and_drop_unscored_rows() -> None:
    nan = float("nan")
    rewards = torch.tensor([[1.0, nan], [0.0, 0.0], [nan, nan], [1.0, 1.0]])
    adv = compute_advantages(rewards, 2, [1.0, 1.0])
    stats = reward_statistics(rewards, 2, [1.0, 1.0], adv, ["a", "b"])
    assert math.isclose(stats["reward"], (1.0 + 0.0 + 2.0) / 3)  # the NaN component counts 0, the NaN row is out
    assert math.isclose(stats["rewards/a/mean"], 2 / 3) and math.isclose(stats["rewards/b/mean"], 0.5)
    assert stats["frac_reward_zero_std"] == 0.5  # group 2 has one scored row: no spread
    assert {"rewards/a/std", "rewards/a/frac_zero_std", "advantages/mean", "advantages/std"} <= set(stats)


def test_is_weights_match_trls_token_truncate() -> None:
    g = torch.Generator().manual_seed(0)
    old = torch.randn(3, 5, generator=g) - 2
    sampler = old + torch.randn(3, 5, generator=g)
    sampler[1, 2] = float("nan")
    mask = torch.ones(3, 5)
    mask[2, 3:] = 0
    # TRL 1.16 GRPOTrainer._generate_and_score_completions, vllm_importance_sampling_mode="token_truncate"
    diff = torch.nan_to_num((old - sampler) * mask, nan=0.0)
    trl = torch.clamp(torch.exp(diff), min=None, max=3.0)
    ours = truncated_is_weights(old, sampler, mask, cap=3.0)
    torch.testing.assert_close(ours, trl)
    assert ours[1, 2] == 1.0 and ours.max() <= 3.0


def test_is_weights_scale_the_policy_gradient_term_only() -> None:
    logps = torch.randn(2, 3, requires_grad=True)
    adv, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 3)
    w = torch.tensor([[0.5, 1.0, 3.0], [1.0, 2.0, 0.1]])
    plain = grpo_loss(logps, adv, mask, loss_type="bnpo").loss
    weighted = grpo_loss(logps, adv, mask, loss_type="bnpo", is_weights=w).loss
    assert math.isclose(float(weighted.detach()), float(-(w * adv.unsqueeze(1)).mean().detach()), rel_tol=1e-6)
    assert not math.isclose(float(plain.detach()), float(weighted.detach()))


def test_entropy_bonus_subtracts_the_mean_token_entropy() -> None:
    logits = torch.randn(2, 3, 7, requires_grad=True)
    index = torch.randint(0, 7, (2, 3))
    logps, ent = logprobs_and_entropy(logits, index)
    probs = torch.softmax(logits, -1)
    torch.testing.assert_close(ent, -(probs * probs.log()).sum(-1))
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    base = grpo_loss(logps, torch.zeros(2), mask, loss_type="grpo")
    bonus = grpo_loss(logps, torch.zeros(2), mask, loss_type="grpo", entropies=ent, entropy_coeff=0.1)
    mean_entropy = float((ent * mask).sum() / mask.sum())
    assert math.isclose(bonus.entropy, mean_entropy, rel_tol=1e-6)
    assert math.isclose(float(bonus.loss), float(base.loss) - 0.1 * mean_entropy, rel_tol=1e-5)
    bonus.loss.backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0  # advantages are 0: only the bonus moves it


def _history(reward: list[float], **components: list[float]) -> list[dict[str, float]]:
    rows = []
    for i, r in enumerate(reward):
        row = {"reward_mean": r}
        row.update({f"rewards/{k}/mean": v[i] for k, v in components.items()})
        rows.append(row)
    return rows


def test_result_reports_each_component_and_flags_a_hacked_rise() -> None:
    up, down = [0.2 + 0.03 * i for i in range(20)], [0.6 - 0.02 * i for i in range(20)]
    hacked = run_result(_history(up, format=down, length=up), {"accuracy": 0.0, "empty_rate": 1.0},
                        ["format", "length"])
    assert hacked["rewards"]["format"]["last10"] < hacked["rewards"]["format"]["first10"]
    assert hacked["eval_accuracy"] == 0.0
    assert len(hacked["flags"]) == 2
    assert "empty" in hacked["flags"][0] and "format fell" in hacked["flags"][1]
    honest = run_result(_history(up, format=up, length=up), {"accuracy": 0.5, "empty_rate": 0.0},
                        ["format", "length"])
    assert honest["flags"] == []


def test_flags_need_every_quality_component_to_fall() -> None:
    trends = {"reward": (0.2, 0.8), "correctness": (0.1, 0.3), "format": (0.9, 0.5)}
    assert run_flags(trends, {}) == []  # correctness rose: not a hack
    trends["correctness"] = (0.3, 0.1)
    assert len(run_flags(trends, {})) == 1
