"""The three phases of one GRPO step: rollout, update, metrics (``trainer.train_grpo`` calls them in order).

- :func:`rollout_phase`: this rank's prompts → G completions each (the engine) → rewards (the task) →
  gathered from every rank → advantages (``advantages.compute_advantages``) → the fixed log-probs the update
  needs (old policy, reference, vLLM importance weights). Nothing here changes a weight.
- :func:`update_phase`: ``num_iterations`` passes over the batch in ``ppo_mini_batch_size`` mini-batches;
  each mini-batch accumulates micro-batch gradients of ``train.batch_size`` completions (reduced across ranks
  on the last one only) and ends in the run's one optimizer step (``RunContext.step_optimizer``).
- :func:`step_metrics`: the step's numbers, averaged or summed over ranks, under TRL's names.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.train.grpo.advantages import (
    compute_advantages,
    count_distinct_advantages,
    gather_rewards,
    local_rows,
    reward_statistics,
)
from gputrain.train.grpo.engines import RolloutEngine, Sampling
from gputrain.train.grpo.loss import grpo_loss, truncated_is_weights
from gputrain.train.grpo.packed_pass import TokenTally, logprob_pass, update_logprobs
from gputrain.train.grpo.prompts import PromptFormat
from gputrain.train.grpo.rollout import Rollout
from gputrain.train.grpo.sharding import hf_model
from gputrain.train.grpo.task import GRPOTask, Row
from gputrain.train.runtime import RunContext


@dataclass
class Policy:
    """What the phases act on: the (wrapped) policy, its tokenizer, the frozen reference, the optimizer."""

    model: Any
    tokenizer: Any
    ref: Any | None
    optimizer: torch.optim.Optimizer
    scheduler: Any
    params: list[torch.nn.Parameter]


@dataclass
class RolloutBatch:
    rows: list[Row]
    roll: Rollout
    all_scores: torch.Tensor  # [B_global, K] rewards of every rank
    all_advantages: torch.Tensor  # [B_global]
    advantages: torch.Tensor  # [B_local] on the device
    mask: torch.Tensor  # completion mask the loss uses (truncated rows dropped if asked)
    old: torch.Tensor | None
    ref: torch.Tensor | None
    is_weights: torch.Tensor | None
    seconds: dict[str, float] = field(default_factory=dict)
    tokens: TokenTally = field(default_factory=TokenTally)


@dataclass
class UpdateStats:
    losses: list[float] = field(default_factory=list)
    kls: list[float] = field(default_factory=list)
    clips: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    norms: list[float] = field(default_factory=list)


def global_sum(value: float, device: torch.device) -> float:
    if not (dist.is_available() and dist.is_initialized()):
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t.item())


def grad_sync(model: torch.nn.Module, sync: bool) -> contextlib.AbstractContextManager[Any]:
    """Reduce gradients only on the last micro-batch of an update (DDP ``no_sync``, FSDP2's switch)."""
    from torch.distributed.fsdp import FSDPModule

    root = hf_model(model)  # under LoRA the FSDP root is inside the PeftModel (sharding.hf_model)
    if isinstance(root, FSDPModule):
        root.set_requires_gradient_sync(sync)
        return contextlib.nullcontext()
    no_sync = getattr(model, "no_sync", None)
    return no_sync() if (no_sync is not None and not sync) else contextlib.nullcontext()


def rollout_phase(
    ctx: RunContext,
    task: GRPOTask,
    policy: Policy,
    engine: RolloutEngine,
    fmt: PromptFormat,
    sampling: Sampling,
    rows: list[Row],
    *,
    weights: Sequence[float],
    n_mini: int,
) -> RolloutBatch:
    algo = ctx.algorithm(GRPOAlgorithm)
    t0 = time.perf_counter()
    t_sync = engine.prepare(policy.model)  # every rank: FSDP2 gathers each weight for vLLM
    t_roll = time.perf_counter()
    roll = engine.generate(fmt.render(policy.tokenizer, [r["prompt"] for r in rows]), sampling)
    t_gen = time.perf_counter() - t_roll
    scores = torch.tensor(task.score(roll.texts, rows), dtype=torch.float32).view(len(rows), -1)
    t_score = time.perf_counter() - t_roll - t_gen
    all_scores = gather_rewards(scores.to(ctx.device)).cpu()
    all_advantages = compute_advantages(
        all_scores,
        algo.num_generations,
        weights,
        aggregation=algo.multi_objective_aggregation,
        scale_rewards=algo.scale_rewards,
    )
    advantages = local_rows(all_advantages, ctx.rank, ctx.world_size).to(ctx.device)
    mask = roll.completion_mask.clone()
    if algo.mask_truncated_completions:
        mask = mask * (~roll.truncated).long().unsqueeze(1)

    input_ids, attn, keep = roll.input_ids, roll.attention_mask, roll.completion_ids.size(1)
    micro = ctx.recipe.train.batch_size
    use_is = algo.vllm_is_correction and roll.sampler_logps is not None
    need_old = n_mini > 1 or algo.num_iterations > 1 or use_is
    tally = TokenTally(real=int(attn.sum()))
    pack = algo.sequence_packing
    with torch.no_grad(), ctx.autocast():
        old = (logprob_pass(policy.model, input_ids, attn, keep, algo.temperature, micro, pack, tally)
               if need_old else None)
        ref = policy.ref
        ref_lp = (logprob_pass(ref, input_ids, attn, keep, algo.temperature, micro, pack, tally)
                  if ref is not None else None)
    is_weights = None
    if use_is and old is not None and roll.sampler_logps is not None:
        is_weights = truncated_is_weights(old.float(), roll.sampler_logps, mask, algo.vllm_is_cap)
    seconds = {"sync": t_sync, "rollout": t_gen, "reward": t_score, "start": t0}
    return RolloutBatch(rows, roll, all_scores, all_advantages, advantages, mask, old, ref_lp, is_weights, seconds,
                        tally)


def update_phase(ctx: RunContext, policy: Policy, batch: RolloutBatch, n_mini: int) -> UpdateStats:
    algo = ctx.algorithm(GRPOAlgorithm)
    micro = ctx.recipe.train.batch_size
    model, mask = policy.model, batch.mask
    input_ids, attn = batch.roll.input_ids, batch.roll.attention_mask
    keep = batch.roll.completion_ids.size(1)
    stats = UpdateStats()
    model.train()
    rows_per_mini = len(batch.rows) // n_mini
    for _ in range(algo.num_iterations):
        for m in range(n_mini):
            sl = slice(m * rows_per_mini, (m + 1) * rows_per_mini)
            tokens_rank = global_sum(float(mask[sl].sum()), ctx.device) / ctx.world_size
            starts = list(range(sl.start, sl.stop, micro))
            for i, s in enumerate(starts):
                mb = slice(s, min(s + micro, sl.stop))
                with grad_sync(model, i == len(starts) - 1):
                    with ctx.autocast():
                        lp, ent = update_logprobs(model, input_ids[mb], attn[mb], keep, algo.temperature,
                                                  algo.sequence_packing, batch.tokens)
                    out = grpo_loss(
                        lp.float(),
                        batch.advantages[mb],
                        mask[mb],
                        old_logps=None if batch.old is None else batch.old[mb].float(),
                        ref_logps=None if batch.ref is None else batch.ref[mb].float(),
                        loss_type=algo.loss_type,
                        beta=algo.beta,
                        kl_ratio_correction=algo.kl_ratio_correction,
                        epsilon_low=algo.epsilon_low,
                        epsilon_high=algo.epsilon_high,
                        max_completion_length=algo.max_completion_length,
                        accum_steps=len(starts),
                        tokens_per_rank=tokens_rank,
                        is_weights=None if batch.is_weights is None else batch.is_weights[mb],
                        entropies=ent if algo.entropy_coeff else ent.detach(),
                        entropy_coeff=algo.entropy_coeff,
                    )
                    ctx.scaler.scale(out.loss).backward()
                stats.losses.append(float(out.loss.detach()) * (len(starts) if algo.loss_type != "dapo" else 1))
                stats.kls.append(out.kl)
                stats.clips.append(out.clip_ratio)
                stats.entropies.append(out.entropy)
            stats.norms.append(ctx.step_optimizer(policy.optimizer, policy.params))
            policy.scheduler.step()
    return stats


def _mean(values: list[float]) -> float:
    return sum(values) / max(1, len(values))


def step_metrics(
    ctx: RunContext,
    task: GRPOTask,
    policy: Policy,
    batch: RolloutBatch,
    stats: UpdateStats,
    *,
    weights: Sequence[float],
    epoch: float,
) -> dict[str, float]:
    """The step's metrics; the loss terms are averaged over ranks, token counts summed, rewards global."""
    algo = ctx.algorithm(GRPOAlgorithm)
    roll = batch.roll
    elapsed = time.perf_counter() - batch.seconds["start"]
    total_tokens = global_sum(float(roll.attention_mask.sum()), ctx.device)
    gen_tokens = global_sum(float(roll.completion_mask.sum()), ctx.device)
    n_global = len(batch.rows) * ctx.world_size
    # dapo's micro-batch losses are shares of one update's token mean: sum them per update.
    loss = sum(stats.losses) / (max(1, len(stats.losses)) if algo.loss_type != "dapo" else len(stats.norms))
    averaged = ctx.all_reduce_mean(
        loss=loss, kl=_mean(stats.kls), clip_ratio=_mean(stats.clips), entropy=_mean(stats.entropies)
    )
    rewards = reward_statistics(batch.all_scores, algo.num_generations, weights, batch.all_advantages,
                                task.reward_names)
    values: dict[str, float] = {
        **averaged,
        "reward_mean": rewards.pop("reward"),
        "reward_std": rewards.pop("reward_std"),
        **rewards,
        "grad_norm": _mean(stats.norms),
        "lr": float(policy.scheduler.get_last_lr()[0]),
        "tokens_per_s": total_tokens / elapsed,
        "rollout_tokens_per_s": gen_tokens / max(batch.seconds["rollout"], 1e-9),
        "completions/mean_length": gen_tokens / n_global,
        "completions/clipped_ratio": global_sum(float(roll.truncated.sum()), ctx.device) / n_global,
        "distinct_advantages": float(count_distinct_advantages(batch.advantages.cpu(), algo.num_generations)),
        "step_seconds": elapsed,
        "rollout_seconds": batch.seconds["rollout"],
        "weight_sync_seconds": batch.seconds["sync"],
        "reward_seconds": batch.seconds["reward"],
        "epoch": epoch,
        # real tokens vs tokens the log-prob and update passes put through the model (this step, all ranks)
        "tokens/real": global_sum(float(batch.tokens.real), ctx.device),
        "tokens/logprob_processed": global_sum(float(batch.tokens.logprob), ctx.device),
        "tokens/update_processed": global_sum(float(batch.tokens.update), ctx.device),
    }
    if batch.is_weights is not None:
        on = batch.mask.bool()
        values["sampling/is_weight_mean"] = ctx.all_reduce_mean(w=float(batch.is_weights[on].mean()))["w"]
    return values
