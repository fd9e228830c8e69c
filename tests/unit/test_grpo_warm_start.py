"""The CPU math profiles' learnable task and supervised warm start (issue 29): one-digit generated arithmetic
(``data.max_operand``), the reference completion the warm start fits, and its batches."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputrain.errors import RecipeError
from gputrain.recipe.schema import DataSpec

pytest.importorskip("torch")
RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def _rows(max_operand: int | None = 9, style: str = "gsm8k", n: int = 64) -> list[dict]:
    from gputrain.train.math_rl.data import load_math_rows

    train, _ = load_math_rows(DataSpec(source="generated", train_size=n, max_operand=max_operand), seed=0,
                              eval_size=8, answer_format=style)
    return train


def test_max_operand_bounds_the_operands_and_leaves_the_default_draws_unchanged() -> None:
    import re

    from gputrain.train.math_rl.arithmetic import generate_problems

    assert generate_problems(200, 3) == generate_problems(200, 3, 20)  # recipes without it: as before
    small = generate_problems(300, 3, 9)
    numbers = [int(n) for p in small for n in re.findall(r"\d+", p["question"])]
    assert numbers and max(numbers) <= 9
    assert max(int(n) for n in re.findall(r"\d+", " ".join(p["question"] for p in generate_problems(300, 3)))) > 9


def test_one_digit_answers_and_the_marker_are_single_tokens_of_the_tiny_tokenizer() -> None:
    from gputrain.train.grpo.policy import train_tiny_tokenizer

    rows = _rows(n=512)
    tok = train_tiny_tokenizer([r["prompt"] for r in rows] + [r["solution"] for r in rows], 512)
    assert len(tok("####", add_special_tokens=False)["input_ids"]) == 1
    for answer in {r["answer"] for r in rows}:  # as it follows the marker: " 14" is one token
        assert len(tok(f" {answer}", add_special_tokens=False)["input_ids"]) == 1, answer


@pytest.mark.parametrize("style", ["gsm8k", "boxed"])
def test_the_reference_completion_is_what_every_reward_pays_in_the_rows_form(style: str) -> None:
    from gputrain.train.math_rl.rewards import correctness_reward, format_reward, integer_reward
    from gputrain.train.math_rl.task import reference_completion

    for row in _rows(style=style, n=32):
        target = reference_completion(row)
        assert target is not None
        assert (correctness_reward(target, row), format_reward(target, row), integer_reward(target, row)) == (1, 1, 1)
    assert reference_completion({"prompt": "p", "answer": "3", "solution": None}) is None


def test_a_warm_start_batch_learns_only_the_completion_and_its_stop_token() -> None:
    from gputrain.train.grpo.policy import train_tiny_tokenizer
    from gputrain.train.grpo.warm_start import sft_batch

    tok = train_tiny_tokenizer(["Question: What is 2 + 3?", "2 + 3 = 5\n#### 5"], 128)
    stop = tok.eos_token_id
    ids, mask, labels = sft_batch(tok, ["Question: What is 2 + 3?", "Q"], ["#### 5", "2 + 3 = 5\n#### 5"], stop,
                                  False, 48)
    for i, (prompt, target) in enumerate([("Question: What is 2 + 3?", "#### 5"), ("Q", "2 + 3 = 5\n#### 5")]):
        p = tok(prompt, add_special_tokens=False)["input_ids"]
        c = tok(target, add_special_tokens=False)["input_ids"] + [stop]
        n = len(p) + len(c)
        assert ids[i, :n].tolist() == p + c and mask[i].sum() == n
        assert labels[i, len(p) : n].tolist() == c
        assert (labels[i, : len(p)] == -100).all() and (labels[i, n:] == -100).all()  # prompt and padding


def test_max_operand_is_refused_where_it_would_be_ignored() -> None:
    from gputrain.planner.resolve import make_plan
    from gputrain.train.math_rl.data import load_math_rows

    with pytest.raises(RecipeError, match="max_operand"):  # a dataset is read as it is
        load_math_rows(DataSpec(source="openai/gsm8k", max_operand=9), seed=0, eval_size=8)
    with pytest.raises(RecipeError, match="max_operand sizes the arithmetic that grpo_math and gdpo generate"):
        make_plan(RECIPES / "grpo_code_mbpp.yaml", gpu="cpu", gpus_per_node=2, overrides=["data.max_operand=9"])


def test_gpu_profiles_do_not_warm_start_nor_shrink_the_task() -> None:
    from gputrain.planner.resolve import make_plan

    for recipe, gpu, gpus in (("grpo_math_fsdp.yaml", "H100", 2), ("gdpo_deepscaler.yaml", "B200", 4)):
        plan = make_plan(RECIPES / recipe, gpu=gpu, gpus_per_node=gpus)
        assert plan.recipe.algorithm.warm_start_steps == 0 and plan.recipe.data.max_operand is None
        cpu = make_plan(RECIPES / recipe, gpu="cpu", gpus_per_node=2)
        assert cpu.recipe.algorithm.warm_start_steps > 0 and cpu.recipe.data.max_operand == 9


def test_cpu_profiles_anchor_the_rl_phase_to_the_warmed_up_policy() -> None:
    """Without a KL term the RL phase unlearns the worked step the warm start taught (operands copied into
    ``a + b = c``: 0.24-0.87 of held-out answers after the warm start, 0.04-0.18 after 300 steps) and the
    greedy gain over the warm start fell below zero in a seed of three (benchmarks/RESULTS.md, #29 round 5)."""
    from gputrain.planner.resolve import make_plan

    for recipe in ("grpo_math_fsdp.yaml", "gdpo_deepscaler.yaml"):
        assert make_plan(RECIPES / recipe, gpu="cpu", gpus_per_node=2).recipe.algorithm.beta > 0, recipe


def _job(root: Path, seed: int, init: float, warm: float, after: float, sampled: tuple[float, float]) -> Path:
    import json

    job = root / f"gdpo_job_{seed}"
    job.mkdir()
    (job / "plan.json").write_text(json.dumps({"recipe": {"entrypoint": "gdpo", "train": {"seed": seed}}}))
    (job / "result.json").write_text(json.dumps({
        "steps": 100, "eval_accuracy": after,
        "warm_start": {"eval_before": {"accuracy": init}, "eval_after": {"accuracy": warm}},
        "rewards": {"correctness": {"first10": sampled[0], "last10": sampled[1]}},
    }))
    truths = ["9", "9", "3", "4"]  # the most frequent answer scores 0.5
    (job / "eval_samples.jsonl").write_text("".join(json.dumps({"eval": 3, "truth": t}) + "\n" for t in truths))
    return job


def test_profile_seeds_scores_init_warm_start_and_grpo_from_the_job_itself(tmp_path: Path) -> None:
    from tests.support.benchmarks import load_benchmark

    seeds = load_benchmark("profile_seeds")
    jobs = [_job(tmp_path, 0, 0.0, 0.6, 0.7, (0.5, 0.6)), _job(tmp_path, 1, 0.0, 0.5, 0.45, (0.4, 0.5)),
            _job(tmp_path, 2, 0.0, 0.55, 0.75, (0.45, 0.55))]
    rows = seeds.warm_start_rows(jobs)
    assert [r.gain for r in rows["job"]] == pytest.approx([0.7, 0.45, 0.75])
    assert [r.gain for r in rows["grpo"]] == pytest.approx([0.1, -0.05, 0.2])
    assert [r.gain for r in rows["grpo_sampled"]] == pytest.approx([0.1, 0.1, 0.1])
    assert rows["job"][0].constant == 0.5 and not rows["job"][1].beats_constant  # 0.45 < 0.5
    assert not seeds.verdict(rows["grpo"]).gain_met and seeds.verdict(rows["grpo_sampled"]).gain_met


def test_the_kl_reference_becomes_the_warmed_up_policy_and_refuses_a_different_model() -> None:
    import copy

    import torch

    from gputrain.errors import GputrainError
    from gputrain.train.grpo.warm_start import copy_into_reference

    torch.manual_seed(0)
    policy = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    ref = copy.deepcopy(policy).requires_grad_(False)  # as build_policy makes it: the random init
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(1.0)  # the warm start moved every weight
    assert copy_into_reference(ref, policy) == 4
    for (name, r), (_, p) in zip(ref.named_parameters(), policy.named_parameters(), strict=True):
        assert torch.equal(r, p), name
        assert not r.requires_grad
    with pytest.raises(GputrainError, match="different parameters"):
        copy_into_reference(torch.nn.Linear(4, 8), policy)


def test_profile_seeds_splits_the_held_out_gain_into_the_first_problems_and_the_unseen_ones(tmp_path: Path) -> None:
    import json

    from gputrain.train.math_rl.data import load_math_rows
    from tests.support.benchmarks import load_benchmark

    seeds = load_benchmark("profile_seeds")
    data = {"source": "generated", "format": "generated", "train_size": 16, "val_size": 4, "max_operand": 9}
    recipe = {"entrypoint": "grpo_math", "train": {"seed": 0}, "data": data,
              "algorithm": {"eval_samples": 4, "answer_format": "gsm8k"}}
    train, _ = load_math_rows(DataSpec.model_validate(data), seed=0, eval_size=4, answer_format="gsm8k")
    problems = [train[0]["problem"], "unseen 1", "unseen 2", "unseen 3"]  # the first repeats a training problem
    verdicts = {1: [0, 0, 0, 0], 2: [1, 0, 0, 0], 3: [1, 1, 1, 0]}  # init, warm start, end
    job = tmp_path / "job"
    job.mkdir()
    (job / "plan.json").write_text(json.dumps({"recipe": recipe}))
    (job / "eval_samples.jsonl").write_text("".join(
        json.dumps({"eval": e, "problem": p, "correct": bool(c)}) + "\n"
        for e, row in verdicts.items() for p, c in zip(problems, row, strict=True)))
    parts = seeds.heldout_breakdown(job, first=2)
    assert parts["all"] == (4, 0.25, 0.75)
    assert parts["first2"] == (2, 0.5, 1.0)
    assert parts["unseen"] == (3, 0.0, 2 / 3)


def test_profile_seeds_reads_longer_sampled_correctness_windows_from_the_metrics(tmp_path: Path) -> None:
    import json

    from tests.support.benchmarks import load_benchmark

    seeds = load_benchmark("profile_seeds")
    lines = [{"step": 0, "warm_eval/accuracy": 0.3}] + [
        {"step": s, "rewards/correctness/mean": r} for s, r in enumerate([0.1, 0.3, 0.5, 0.5, 0.7, 0.9], 1)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert seeds.sampled_windows(tmp_path, 2) == pytest.approx((0.2, 0.8))
    with pytest.raises(SystemExit, match="fewer than two windows"):
        seeds.sampled_windows(tmp_path, 4)


def test_profile_seeds_measures_whether_the_worked_step_copies_the_operands(tmp_path: Path) -> None:
    import json

    from tests.support.benchmarks import load_benchmark

    seeds = load_benchmark("profile_seeds")
    q = "Ben has 6 apples and gets 3 more. How many apples does Ben have?"
    completions = {1: ["\n\n"], 2: ["6 + 3 = 9\n#### 9", "3 + 6 = 8\n#### 9"], 3: ["7 + 3 = 9\n#### 9", "9"]}
    (tmp_path / "eval_samples.jsonl").write_text("".join(
        json.dumps({"eval": e, "problem": q, "completion": c, "correct": c.endswith("9")}) + "\n"
        for e, texts in completions.items() for c in texts))
    # eval 1 (init) is left out; eval 2: both copy 6 and 3, one computes 6 + 3 right; eval 3: neither copies
    assert seeds.worked_step(tmp_path) == [(2, 1.0, 1.0, 0.5), (3, 1.0, 0.0, 0.0)]
