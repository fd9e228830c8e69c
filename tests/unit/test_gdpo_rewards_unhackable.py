"""Every GDPO variant has a correctness reward, and a constant answer cannot raise its total (issue 29).

Before: the CPU profile trained ``[format, integer, length]``; " 42 42 42"-style policies raised the total with
accuracy 0. Checked on every profile and preset of ``gdpo_deepscaler`` as the loader merges them, scoring
every constant answer in both answer forms on real rows with the real scorer and the variant's gates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gputrain.recipe.algorithms.grpo import GDPOAlgorithm, GRPOAlgorithm
from gputrain.recipe.loader import deep_merge, load_source, validate_source
from gputrain.train.math_rl.arithmetic import generate_problems
from gputrain.train.math_rl.data import to_row
from gputrain.train.math_rl.rewards import MathScorer

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "gdpo_deepscaler.yaml"
GSM_ROWS = [to_row(r, "arithmetic") for r in generate_problems(12, seed=5)]
BOXED_ROWS = [to_row({"problem": f"Compute {a} plus {a}.", "solution": "", "answer": str(2 * a)}, "deepscaler")
              for a in range(1, 13)]
#: Every answer some row has (a constant right somewhere) and a few right nowhere, in each form.
VALUES = sorted({r["answer"] for r in GSM_ROWS + BOXED_ROWS} | {"0", "42", "-1"})
CONSTANTS = [form.format(v) for v in VALUES for form in ("#### {0}", "\\boxed{{{0}}}", " {0} {0} {0}")]


def _variants() -> list[tuple[str, Any]]:
    source = load_source(RECIPE)
    out = [("base", validate_source(source).algorithm)]
    for name, profile in source.data["profiles"].items():
        merged = deep_merge(source.data, profile.get("set", {}))
        out.append((name, validate_source(type(source)(source.path, merged, source.marks)).algorithm))
        for preset, layer in profile.get("presets", {}).items():
            data = deep_merge(merged, layer)
            out.append((f"{name}/{preset}", validate_source(type(source)(source.path, data, source.marks)).algorithm))
    return out


_SEEN: dict[str, float] = {}


def _gain_beyond_accuracy(algo: GRPOAlgorithm, rows: list[dict[str, Any]]) -> float:
    """The most any constant answer earns, in weighted total, on the rows where it is wrong."""
    key = algo.model_dump_json(include={"rewards", "reward_weights", "length_budget", "length_gate",
                                        "reward_gate"}) + str(rows is GSM_ROWS)
    if key not in _SEEN:  # the B200 presets, H100 and H200 share the base's rewards
        _SEEN[key] = _gain(algo, rows)
    return _SEEN[key]


def _gain(algo: GRPOAlgorithm, rows: list[dict[str, Any]]) -> float:
    rewards = list(algo.rewards)
    weights = list(algo.reward_weights or [1.0] * len(rewards))
    scorer = MathScorer(rewards, length_budget=algo.length_budget, length_gate=algo.length_gate,
                        reward_gate=algo.reward_gate)
    worst = 0.0
    for answer in CONSTANTS:
        scores = scorer([answer] * len(rows), rows)
        for s in scores:
            correct = s[rewards.index("correctness")] if "correctness" in rewards else 0.0
            total = sum(w * v for w, v in zip(weights, s, strict=True))
            worst = max(worst, total if not correct else 0.0)
    return worst


VARIANTS = _variants()


def test_every_variant_is_checked() -> None:
    names = [n for n, _ in VARIANTS]
    assert {"base", "cpu", "B200-192GB/7B", "H100-80GB"} <= set(names) and len(names) == 8


@pytest.mark.parametrize(("name", "algo"), VARIANTS, ids=[n for n, _ in VARIANTS])
def test_every_gdpo_variant_rewards_correctness_and_a_constant_answer_earns_nothing_else(
    name: str, algo: GDPOAlgorithm
) -> None:
    assert isinstance(algo, GDPOAlgorithm) and algo.multi_objective_aggregation == "normalize_then_sum"
    assert "correctness" in algo.rewards
    rows = GSM_ROWS if name == "cpu" else BOXED_ROWS  # the cpu profile trains generated GSM8K-style problems
    assert _gain_beyond_accuracy(algo, rows) == 0.0


def test_the_checker_catches_the_old_cpu_profile() -> None:
    old = GRPOAlgorithm(rewards=["format", "integer", "length"], reward_weights=[1.0, 1.0, 1.0], length_budget=8,
                        length_gate="format", max_completion_length=16)
    assert _gain_beyond_accuracy(old, GSM_ROWS) == 3.0  # "#### 42" earned all three on every question
    ungated = old.model_copy(update={"rewards": ["correctness", "format", "length"]})
    assert _gain_beyond_accuracy(ungated, GSM_ROWS) == 2.0  # a correctness reward alone is not enough


def test_a_gdpo_recipe_without_correctness_or_with_summed_rewards_is_refused() -> None:
    with pytest.raises(ValueError, match="no 'correctness'"):
        GDPOAlgorithm(rewards=["format", "integer"])
    with pytest.raises(ValueError, match="normalize_then_sum"):
        GDPOAlgorithm(multi_objective_aggregation="sum_then_normalize")  # type: ignore[arg-type]
    assert GDPOAlgorithm().multi_objective_aggregation == "normalize_then_sum"  # the plan says what runs
    assert GDPOAlgorithm().reward_gate == "correctness" and GRPOAlgorithm().reward_gate == "none"
