"""GRPO on math with verified answers (GSM8K ``####``, MATH ``\\boxed{}``), FSDP full-shard.

    torchrun --nproc_per_node 2 -m gputrain.train.grpo_math --plan JOB/plan.json --job-dir JOB
    gputrain run recipes/grpo_math_fsdp.yaml --gpu cpu --gpus 2      # tiny model, fully_shard over gloo

Thin on purpose: it picks the math data, rewards (default correctness + format) and evaluation, and hands
them to the shared GRPO core, which samples, scores, normalises, updates, checkpoints and evaluates. The
core shards with torch's ``fully_shard`` when ``distributed.strategy: fsdp`` (on CPU too, where
accelerate's plugin would silently fall back to DDP) and records the strategy that really ran
(``strategy_in_effect`` in ``result.json``); this entry repeats it in the log so the summary shows it.
"""

from __future__ import annotations

from gputrain.train.runtime import RunContext, run_entrypoint

DEFAULT_REWARDS = ("correctness", "format")


def report_strategy(ctx: RunContext, entry: str) -> None:
    """One log line comparing the requested strategy with the one the core ran (from result.json)."""
    import json

    requested = ctx.recipe.distributed.strategy
    result_path = ctx.job_dir / "result.json"
    if not ctx.is_main or not result_path.exists():
        return
    ran = json.loads(result_path.read_text()).get("strategy_in_effect", "unknown")
    note = "" if ran == requested or ctx.world_size == 1 else " (differs from the request)"
    ctx.print0(f"[{entry}] strategy requested={requested} in effect={ran}{note}")


def train(ctx: RunContext) -> int:
    from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
    from gputrain.train.grpo.trainer import train_grpo
    from gputrain.train.math_rl.task import build_math_task

    recipe = ctx.recipe
    with ctx.phase(f"loading data {recipe.data.source}", when=recipe.data.source != "generated"):
        task = build_math_task("grpo_math", DEFAULT_REWARDS, data=recipe.data, model=recipe.model,
                               algo=ctx.algorithm(GRPOAlgorithm), seed=ctx.seed, job_dir=ctx.job_dir)
    ctx.print0(
        f"[grpo_math] {len(task.train_rows)} training / {len(task.eval_rows)} eval problems, "
        f"rewards {', '.join(task.reward_names)}"
    )
    code = train_grpo(ctx, task)
    report_strategy(ctx, "grpo_math")
    return code


if __name__ == "__main__":
    run_entrypoint(train)
