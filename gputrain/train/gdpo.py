"""GDPO: multi-reward RL with group reward-decoupled normalisation (arXiv 2601.05242).

    torchrun --nproc_per_node 4 -m gputrain.train.gdpo --plan JOB/plan.json --job-dir JOB
    gputrain run recipes/gdpo_deepscaler.yaml --gpu cpu --gpus 2     # tiny model, warm start + GDPO, ~3 min

Each reward component is z-scored within its group, the weighted sum is z-scored over the whole batch
(``multi_objective_aggregation: normalize_then_sum``, in ``gputrain.train.grpo.advantages``). Why: summing
first maps different reward mixes, say (0,1), (0,2) and (1,2) in a group of two, onto the same advantage;
normalising per reward keeps them apart. Default rewards: correctness + length budget on DeepScaleR/MATH,
correctness + format + integer answer on GSM8K-style data. The aggregation is fixed by the recipe's schema
(``GDPOAlgorithm``), so the plan says what runs; its ``reward_gate: correctness`` default pays the format
and integer rewards only on correct answers, so an answer that ignores the question cannot raise the total.

Besides the core's metrics (per-component reward mean/std, response length, distinct advantages), this
entry records for each step the distinct advantage values GDPO gives and what summed GRPO would give on the
same rewards (rank 0's groups), in ``gdpo_resolution.jsonl``, and their means in ``result.json``.
"""

from __future__ import annotations

import json
from typing import Any

from gputrain.train.grpo_math import report_strategy
from gputrain.train.runtime import RunContext, run_entrypoint

GSM8K_REWARDS = ("correctness", "format", "integer")
BOXED_REWARDS = ("correctness", "length")
RESOLUTION_FILE = "gdpo_resolution.jsonl"


class ResolutionTracker:
    """Wraps the task's scorer: per rollout step, distinct advantages under GDPO vs summed GRPO.

    Counted per group on this rank's rows: a group's distinct values are unchanged by GDPO's final batch
    z-score (an increasing affine map), so no gather is needed for the comparison.
    """

    def __init__(self, ctx: RunContext, score: Any, group: int, weights: list[float]) -> None:
        self.ctx, self.score, self.group, self.weights = ctx, score, group, weights
        self.steps = ctx.checkpoints.latest_step() or 0  # a resumed run continues the core's step count
        self.seen = 0
        self.totals = {"gdpo": 0.0, "grpo": 0.0}

    def __call__(self, completions: list[str], rows: list[dict[str, Any]]) -> list[list[float]]:
        import torch

        from gputrain.train.grpo.advantages import compute_advantages, count_distinct_advantages

        scores = self.score(completions, rows)
        rewards = torch.tensor(scores, dtype=torch.float32)
        counts = {
            name: count_distinct_advantages(
                compute_advantages(rewards, self.group, self.weights, aggregation=agg), self.group
            )
            for name, agg in (("gdpo", "normalize_then_sum"), ("grpo", "sum_then_normalize"))
        }
        self.steps += 1
        self.seen += 1
        for name, value in counts.items():
            self.totals[name] += value
        if self.ctx.is_main:
            record = {"step": self.steps, **{f"distinct_{k}": v for k, v in counts.items()}}
            with open(self.ctx.job_dir / RESOLUTION_FILE, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")
        return scores

    def summary(self) -> dict[str, float]:
        """Mean distinct advantages per step under each aggregation (``result.json``)."""
        if not self.seen:
            return {}
        return {f"distinct_advantages_{name}_mean": total / self.seen for name, total in self.totals.items()}


def train(ctx: RunContext) -> int:
    from gputrain.recipe.algorithms.grpo import GDPOAlgorithm
    from gputrain.train.grpo.trainer import train_grpo
    from gputrain.train.math_rl.task import build_math_task

    recipe = ctx.recipe
    algo = ctx.algorithm(GDPOAlgorithm)  # the plan holds normalize_then_sum: the entry rewrites nothing
    source = recipe.data.source
    gsm_like = source == "generated" or "gsm8k" in source.lower()
    with ctx.phase(f"loading data {source}", when=source != "generated"):
        task = build_math_task("gdpo", GSM8K_REWARDS if gsm_like else BOXED_REWARDS, data=recipe.data,
                               model=recipe.model, algo=algo, seed=ctx.seed, job_dir=ctx.job_dir)
    weights = list(algo.reward_weights or [1.0] * len(task.reward_names))
    tracker = ResolutionTracker(ctx, task.score, algo.num_generations, weights)
    task.plain_score, task.score = task.score, tracker
    task.final_report = tracker.summary
    ctx.print0(
        f"[gdpo] {len(task.train_rows)} training / {len(task.eval_rows)} eval problems, rewards "
        + ", ".join(f"{n}×{w:g}" for n, w in zip(task.reward_names, weights, strict=True))
    )
    code = train_grpo(ctx, task)
    report_strategy(ctx, "gdpo")
    return code


if __name__ == "__main__":
    run_entrypoint(train)
