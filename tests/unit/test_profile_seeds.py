"""benchmarks/profile_seeds.py: issue 29's seed criterion read off job folders laid out as the trainers write them."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.benchmarks import load_benchmark


@pytest.fixture(scope="module")
def seeds() -> ModuleType:
    return load_benchmark("profile_seeds")


def _job(root: Path, name: str, entry: str, seed: int, result: dict[str, Any],
         truths: list[str] | None = None) -> Path:
    """A job folder as the trainer leaves it: plan.json's recipe, result.json, the math evaluator's table."""
    job = root / name / f"{entry}_job_local-1_20261126_120000"
    job.mkdir(parents=True)
    (job / "plan.json").write_text(json.dumps({"recipe": {"entrypoint": entry, "train": {"seed": seed}}}))
    (job / "result.json").write_text(json.dumps({"steps": 30, **result}))
    if truths is not None:  # two evaluations; the constant is read from the last one
        lines = [{"eval": e, "truth": t, "prediction": None, "correct": False} for e in (1, 2) for t in truths]
        (job / "eval_samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return job


def test_math_jobs_give_per_seed_gain_spread_and_the_most_frequent_answer(seeds: ModuleType, tmp_path: Path) -> None:
    truths = ["7", "7", "7", "12", "3", "7.0", "5", "9"]  # "7" and "7.0" are one answer: 4/8
    before = [_job(tmp_path, f"init{s}", "grpo_math", s, {"eval_accuracy": 0.0}, truths) for s in range(3)]
    after = [_job(tmp_path, f"seed{s}", "grpo_math", s, {"eval_accuracy": a}, truths)
             for s, a in enumerate([0.625, 0.75, 0.625])]
    head, rows = seeds.collect(before, after)
    assert head.key == "eval_accuracy"
    assert [(r.seed, r.before, r.after) for r in rows] == [(0, 0.0, 0.625), (1, 0.0, 0.75), (2, 0.0, 0.625)]
    assert [r.constant for r in rows] == [0.5, 0.5, 0.5]
    v = seeds.verdict(rows)
    assert v.mean_gain == pytest.approx(2 / 3) and v.spread == pytest.approx(0.125)
    assert v.gain_met and v.beats_constant and v.met
    assert "criterion MET" in seeds.table(head, rows)


def test_criterion_fails_on_spread_on_two_seeds_and_below_the_constant(seeds: ModuleType) -> None:
    def row(seed: int, before: float, after: float, constant: float = 0.0, higher: bool = True) -> Any:
        return seeds.SeedRow(seed, before, after, constant, higher, 10)

    # mean gain 0.5, spread 0.8: 0.5 > 1.6 is false, though every seed gained
    assert not seeds.verdict([row(0, 0, 0.1), row(1, 0, 0.5), row(2, 0, 0.9)]).gain_met
    # mean 0.6 > 2 x 0.2 holds, but two seeds are not enough
    assert not seeds.verdict([row(0, 0, 0.5), row(1, 0, 0.7)]).gain_met
    assert seeds.verdict([row(0, 0, 0.5), row(1, 0, 0.6), row(2, 0, 0.7)]).gain_met
    # a tie with the constant answer is not above it
    tie = seeds.verdict([row(s, 0, 0.5, constant=0.5) for s in range(3)])
    assert tie.gain_met and not tie.beats_constant and not tie.met


def test_colours_gain_when_they_fall_and_a_tie_with_random_search_is_not_met(seeds: ModuleType, tmp_path: Path) -> None:
    gnn = {"network_conflicts_per_edge": 0.4, "random_conflicts_per_edge": 0.23, "colours_random_search": 3.78,
           "colours_network_search": 3.78, "colours_random_short_search": 3.78,
           "moves_saved_vs_random_search_median": 5.0}
    # the headline is the short-budget search (where the start matters); the full budget is printed beside it
    before = [_job(tmp_path, f"init{s}", "gnn_coloring", s, {**gnn, "colours_network_short_search": 4.0})
              for s in range(3)]
    after = [_job(tmp_path, f"seed{s}", "gnn_coloring", s, {**gnn, "colours_network_short_search": 3.78})
             for s in range(3)]
    head, rows = seeds.collect(before, after)
    assert not head.higher_is_better
    assert [r.gain for r in rows] == pytest.approx([0.22] * 3)  # fewer colours after: a positive gain
    v = seeds.verdict(rows)
    assert v.gain_met and not v.beats_constant and not v.met


def test_mixed_entrypoints_and_a_missing_before_seed_are_refused(seeds: ModuleType, tmp_path: Path) -> None:
    b = _job(tmp_path, "init0", "grpo_math", 0, {"eval_accuracy": 0.0}, ["1"])
    a = _job(tmp_path, "seed1", "grpo_math", 1, {"eval_accuracy": 0.5}, ["1"])
    with pytest.raises(SystemExit, match="no --before job for seed 1"):
        seeds.collect([b], [a])
    g = _job(tmp_path, "gnn0", "gnn_coloring", 0, {"colours_network_short_search": 3.0,
                                                   "colours_random_short_search": 3.0,
                                                   "colours_network_search": 3.0, "colours_random_search": 3.0,
                                                   "network_conflicts_per_edge": 0.1, "random_conflicts_per_edge": 0.2,
                                                   "moves_saved_vs_random_search_median": 1.0})
    with pytest.raises(SystemExit, match="several entrypoints"):
        seeds.collect([b], [g])
