"""Hand-computed cases that pin down GRPO's and GDPO's advantages (arXiv 2601.05242, section 3)."""

from __future__ import annotations

import math

import pytest
import torch

from gputrain.train.grpo.advantages import compute_advantages, count_distinct_advantages, local_rows

R = 1 / math.sqrt(2)  # 0.7071: ±0.5 / Bessel std of {0, 1}


def paper_case() -> torch.Tensor:
    """Two binary rewards, two rollouts per prompt; reward sums (0,1), (0,2), (1,2)."""
    return torch.tensor(
        [
            [0.0, 0.0], [0.0, 1.0],  # sums 0, 1
            [0.0, 0.0], [1.0, 1.0],  # sums 0, 2
            [1.0, 0.0], [1.0, 1.0],  # sums 1, 2
        ]
    )  # fmt: skip


def test_summed_grpo_gives_the_same_advantage_to_sums_01_02_12() -> None:
    adv = compute_advantages(paper_case(), 2, aggregation="sum_then_normalize", scale_rewards="group")
    expected = torch.tensor([-R, R, -R, R, -R, R])
    assert torch.allclose(adv, expected, atol=2e-4)
    assert count_distinct_advantages(adv) == 2


def test_gdpo_separates_a_double_success_from_a_single_one() -> None:
    adv = compute_advantages(paper_case(), 2, aggregation="normalize_then_sum")
    # Per component group z-scores, summed: (0,1) -> ±0.7071, (0,2) -> ±1.4142, (1,2) -> ±0.7071.
    # Whole-batch z-score of s = [-a, a, -2a, 2a, -a, a] (mean 0, Bessel std of that vector).
    s = torch.tensor([-R, R, -2 * R, 2 * R, -R, R])
    expected = s / (s.std(unbiased=True) + 1e-4)
    assert torch.allclose(adv, expected, atol=1e-3)
    assert abs(adv[3]) > abs(adv[1]) * 1.9  # the (0,2) group gets twice the push of (0,1)
    grpo = compute_advantages(paper_case(), 2, aggregation="sum_then_normalize")
    assert count_distinct_advantages(adv) == 4 > count_distinct_advantages(grpo) == 2


@pytest.mark.parametrize("aggregation", ["sum_then_normalize", "normalize_then_sum"])
def test_components_that_always_sum_to_a_constant_give_zero(aggregation: str) -> None:
    rewards = torch.tensor([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.3, 0.7], [0.6, 0.4]])
    adv = compute_advantages(rewards, 2, aggregation=aggregation)
    # GDPO's batch z-score divides float round-off (~1e-8) by (std + 1e-4): zero up to ~1e-3, as in TRL.
    assert torch.allclose(adv, torch.zeros(6), atol=2e-3)


def test_scale_rewards_group_batch_none_by_hand() -> None:
    rewards = torch.tensor([1.0, 3.0, 0.0, 4.0])  # groups {1,3} and {0,4}
    none = compute_advantages(rewards, 2, scale_rewards="none")
    assert torch.allclose(none, torch.tensor([-1.0, 1.0, -2.0, 2.0]))
    group = compute_advantages(rewards, 2, scale_rewards="group", eps=0.0)
    assert torch.allclose(group, torch.tensor([-R, R, -R, R]), atol=1e-6)
    batch = compute_advantages(rewards, 2, scale_rewards="batch", eps=0.0)
    batch_std = math.sqrt(((1 - 2) ** 2 + (3 - 2) ** 2 + (0 - 2) ** 2 + (4 - 2) ** 2) / 3)
    assert torch.allclose(batch, torch.tensor([-1.0, 1.0, -2.0, 2.0]) / batch_std, atol=1e-6)


def test_weights_scale_components_before_the_sum() -> None:
    rewards = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    adv = compute_advantages(rewards, 2, [1.0, 3.0], scale_rewards="none")
    assert torch.allclose(adv, torch.tensor([-0.5, 0.5, -1.5, 1.5]))
    gdpo = compute_advantages(rewards, 2, [1.0, 3.0], aggregation="normalize_then_sum")
    assert abs(gdpo[3]) > abs(gdpo[1]) * 2.9


def test_identical_group_gives_zero_and_no_nan() -> None:
    rewards = torch.tensor([[1.0, 1.0]] * 4)
    for aggregation in ("sum_then_normalize", "normalize_then_sum"):
        adv = compute_advantages(rewards, 4, aggregation=aggregation)
        assert torch.equal(adv, torch.zeros(4))


def test_unscored_rows_get_zero_and_do_not_bias_the_baseline() -> None:
    nan = float("nan")
    rewards = torch.tensor([[nan], [0.0], [1.0]])
    adv = compute_advantages(rewards, 3, scale_rewards="none")
    assert torch.allclose(adv, torch.tensor([0.0, -0.5, 0.5]))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"group_size": 4}, "whole number of groups"),
        ({"group_size": 2, "weights": [1.0]}, "1 reward weights for 2"),
        ({"group_size": 2, "aggregation": "mean"}, "aggregation must be"),
        ({"group_size": 2, "scale_rewards": "rank"}, "scale_rewards must be"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        compute_advantages(torch.zeros(6, 2), **kwargs)


def test_local_rows_slices_in_rank_order() -> None:
    values = torch.arange(8.0)
    assert local_rows(values, 1, 2).tolist() == [4.0, 5.0, 6.0, 7.0]


def test_distinct_count_per_group_counts_each_group() -> None:
    adv = torch.tensor([-1.0, 1.0, -1.0, 1.0])
    assert count_distinct_advantages(adv) == 2
    assert count_distinct_advantages(adv, group_size=2) == 4


def test_gdpo_never_resolves_binary_rewards_more_coarsely_than_summed_grpo() -> None:
    # With 0/1 components each group z-score is an increasing map of its component, so rows that
    # summed GRPO tells apart stay apart; over many random batches GDPO is never below and usually above.
    gen = torch.Generator().manual_seed(0)
    above = 0
    for _ in range(200):
        rewards = (torch.rand(32, 3, generator=gen) < 0.3).float()
        gdpo = count_distinct_advantages(compute_advantages(rewards, 8, aggregation="normalize_then_sum"), 8)
        grpo = count_distinct_advantages(compute_advantages(rewards, 8, aggregation="sum_then_normalize"), 8)
        assert gdpo >= grpo
        above += gdpo > grpo
    assert above > 150
