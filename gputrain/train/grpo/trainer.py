"""The GRPO training loop shared by grpo_code, grpo_math and gdpo.

One rollout step: every rank samples its share of ``train_batch_size`` prompts, generates G completions
each, scores them with the task's reward components; rewards are gathered from all ranks and turned
into advantages by ``gputrain.train.grpo.advantages.compute_advantages`` (group or batch scaling, GRPO or
GDPO aggregation); then ``num_iterations`` passes over the batch in mini-batches of
``ppo_mini_batch_size`` prompts, each one optimizer update built from micro-batches of ``train.batch_size``
completions (clipped ratio + β·k3 KL to a frozen reference, ``gputrain.train.grpo.loss``).

Everything distributed goes through the shared runtime (``gputrain.train.runtime``): process group,
precision (fp16 + GradScaler, bf16, fp32 on CPU), ``metrics.jsonl``, checkpoints that resume, preemption
(checkpoint, PREEMPTED, exit 75). Evaluation runs on rank 0 only while the others wait.

Rollouts use HF ``generate`` or a colocated vLLM engine (``rollout.pick_engine``; ``vllm_engine``). With
vLLM, the policy's weights are pushed into it once after start/resume and after each step's optimizer
updates, before the next rollout (no rollout happens between the updates of one step, so one push per
step is enough); ``weight_sync_seconds`` records its cost next to ``rollout_tokens_per_s``.
"""

from __future__ import annotations

import contextlib
import copy
import random
import time
from typing import Any

import torch
import torch.distributed as dist

from gputrain.errors import GputrainError
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.train.grpo.advantages import (
    compute_advantages,
    count_distinct_advantages,
    gather_rewards,
    local_rows,
    reward_statistics,
)
from gputrain.train.grpo.loss import (
    completion_logprobs,
    completion_logprobs_and_entropy,
    grpo_loss,
    truncated_is_weights,
)
from gputrain.train.grpo.policy import (
    build_model,
    enable_gradient_checkpointing,
    policy_tokenizer,
)
from gputrain.train.grpo.prompts import PromptFormat, resolve_prompt_format, stop_token_ids
from gputrain.train.grpo.results import run_result
from gputrain.train.grpo.rollout import generate, pick_engine
from gputrain.train.grpo.sharding import (
    apply_ddp,
    apply_fsdp,
    compile_layers,
    sharding_report,
    unsharded_for_generation,
    unwrap,
)
from gputrain.train.grpo.state import load_full_state, save_full_state
from gputrain.train.grpo.task import GRPOTask
from gputrain.train.runtime import RunContext
from gputrain.train.runtime.schedule import lr_factor


def batch_sizes(algo: GRPOAlgorithm, micro: int, world: int) -> tuple[int, int]:
    """(train_batch_size, ppo_mini_batch_size) in prompts, global; both multiples of the world size."""
    train_bs = algo.train_batch_size or world * max(1, micro // algo.num_generations)
    mini_bs = algo.ppo_mini_batch_size or train_bs
    if train_bs % world or mini_bs % world:
        raise GputrainError(
            f"algorithm.train_batch_size={train_bs} and ppo_mini_batch_size={mini_bs} must be multiples "
            f"of the {world} ranks"
        )
    if train_bs % mini_bs:
        raise GputrainError(f"algorithm.train_batch_size={train_bs} is not a multiple of {mini_bs}")
    return train_bs, mini_bs


def _prompt_order(n: int, seed: int, epoch: int) -> list[int]:
    order = list(range(n))
    random.Random(seed * 1000003 + epoch).shuffle(order)
    return order


def _global_sum(value: float, device: torch.device) -> float:
    if not (dist.is_available() and dist.is_initialized()):
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t.item())


def _grad_sync(model: torch.nn.Module, sync: bool) -> contextlib.AbstractContextManager[Any]:
    """Reduce gradients only on the last micro-batch of an update (DDP ``no_sync``, FSDP2's switch)."""
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(sync)
        return contextlib.nullcontext()
    no_sync = getattr(model, "no_sync", None)
    return no_sync() if (no_sync is not None and not sync) else contextlib.nullcontext()


def build_policy(ctx: RunContext, task: GRPOTask) -> tuple[Any, Any, Any | None, str]:
    """(policy, tokenizer, frozen reference or None, strategy in effect), wrapped for the world size."""
    algo = ctx.algorithm(GRPOAlgorithm)
    recipe = ctx.recipe
    tokenizer = policy_tokenizer(recipe.model, task.corpus)
    model = build_model(recipe.model, tokenizer, attention=recipe.train.attention, seed=ctx.seed)
    model.to(ctx.device)
    ref = None
    if algo.beta > 0:
        ref = copy.deepcopy(model).eval().requires_grad_(False)
        if ctx.precision.name != "fp32":
            ref.to(ctx.precision.dtype)
    if recipe.train.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    if recipe.train.compile:
        ctx.print0(f"[grpo] {compile_layers(model, ctx.device)}")
    strategy = recipe.distributed.strategy
    in_effect = "single"
    if ctx.world_size > 1 and strategy == "fsdp":
        param_dtype = ctx.precision.dtype if ctx.precision.name == "bf16" else None
        model = apply_fsdp(model, ctx.device.type, param_dtype=param_dtype)
        if ref is not None:
            ref = apply_fsdp(ref, ctx.device.type)
        report = sharding_report(model, "fsdp")
        if not report.sharded:
            raise GputrainError(f"FSDP requested but parameters are not sharded ({report})")
        in_effect = "fsdp"
    elif ctx.world_size > 1 and strategy in ("ddp", "deepspeed"):
        if strategy == "deepspeed":
            ctx.print0("[grpo] warning: the GRPO core has no DeepSpeed path; running DDP (see result.json)")
        model = apply_ddp(model, ctx.device)
        in_effect = "ddp"
    return model, tokenizer, ref, in_effect


def train_grpo(ctx: RunContext, task: GRPOTask) -> int:
    """Train ``task`` with GRPO from the resolved plan; returns the process exit code (0)."""
    algo = ctx.algorithm(GRPOAlgorithm)
    train = ctx.recipe.train
    micro = train.batch_size
    train_bs, mini_bs = batch_sizes(algo, micro, ctx.world_size)
    group = algo.num_generations
    local_prompts = train_bs // ctx.world_size
    n_mini = train_bs // mini_bs
    n_rows = len(task.train_rows)
    if n_rows < train_bs:
        raise GputrainError(f"{task.name}: {n_rows} training prompts, fewer than train_batch_size {train_bs}")
    steps_per_epoch = n_rows // train_bs
    max_steps = train.max_steps or (train.epochs or 1) * steps_per_epoch  # the schema requires one of them
    weights = algo.reward_weights or [1.0] * len(task.reward_names)

    engine, engine_note = pick_engine(algo.rollout_engine, ctx.device, ctx.recipe.memory.vllm_gpu_memory_utilization)
    model, tokenizer, ref, strategy = build_policy(ctx, task)
    ctx.print0(f"[grpo] rollout engine: {engine_note}")
    fmt = resolve_prompt_format(algo.prompt_format, tokenizer, algo.system_prompt)
    stops = stop_token_ids(tokenizer, getattr(unwrap(model), "generation_config", None))
    ctx.print0(f"[grpo] prompts: {fmt.mode}{' with a system turn' if fmt.system else ''}; stop ids {stops}")
    vllm_engine = None
    if engine == "vllm":
        from gputrain.train.grpo.vllm_engine import engine_from_context

        vllm_engine = engine_from_context(ctx, model, tokenizer, algo)
        for note in vllm_engine.notes:
            ctx.print0(f"[grpo] vLLM {vllm_engine.version}: {note}")
    weights_stale = True  # vLLM holds the start-up weights until the first sync (after a resume too)
    ctx.seed_per_rank()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params,
        lr=train.learning_rate,
        weight_decay=train.weight_decay,
    )
    total_updates = max_steps * n_mini * algo.num_iterations
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lr_factor(train.lr_schedule, train.warmup_steps, total_updates),
    )
    report = sharding_report(model, strategy)
    ctx.print0(
        f"[grpo] {task.name}: params={report.global_numel} "
        f"strategy={strategy} (local numel {report.local_numel}/{report.global_numel}) engine={engine} "
        f"prompts/step={train_bs} G={group} mini-batches={n_mini} steps={max_steps} "
        f"precision={ctx.precision.name} loss={algo.loss_type} beta={algo.beta}"
    )

    step, pos = 0, {"epoch": 0, "index": 0}
    ckpt = ctx.checkpoints.load_latest()
    if ckpt is not None:
        load_full_state(model, optimizer, ckpt.state)
        scheduler.load_state_dict(ckpt.state["scheduler"])
        ctx.scaler.load_state_dict(ckpt.state["scaler"])
        ckpt.restore_rng()
        step, pos = ckpt.step, dict(ckpt.state["pos"])
        ctx.print0(f"[grpo] resumed from {ckpt.path.name} at step {step}")

    def state() -> dict[str, Any]:
        full = save_full_state(model, optimizer)
        return {**full, "scheduler": scheduler, "scaler": ctx.scaler, "pos": dict(pos)}

    save_every = train.save_every
    eval_every = train.eval_every
    log_every = train.log_every
    last_eval: dict[str, float] = {}
    history: list[dict[str, float]] = []

    while step < max_steps:
        t0 = time.perf_counter()
        order = _prompt_order(n_rows, ctx.seed, pos["epoch"])
        if pos["index"] + train_bs > n_rows:
            pos = {"epoch": pos["epoch"] + 1, "index": 0}
            order = _prompt_order(n_rows, ctx.seed, pos["epoch"])
        chosen = order[pos["index"] : pos["index"] + train_bs]
        mine = chosen[ctx.rank * local_prompts : (ctx.rank + 1) * local_prompts]
        rows = [task.train_rows[i] for i in mine for _ in range(group)]
        pos = {"epoch": pos["epoch"], "index": pos["index"] + train_bs}

        t_sync = 0.0
        if vllm_engine is not None and weights_stale:
            vllm_engine.sync_weights(model)  # every rank: FSDP2 gathers each weight
            weights_stale = False
            t_sync = time.perf_counter() - t0
        t_roll = time.perf_counter()
        sampling: dict[str, Any] = {
            "max_prompt_length": algo.max_prompt_length,
            "max_new_tokens": algo.max_completion_length,
            "temperature": algo.temperature,
            "top_p": algo.top_p,
            "top_k": algo.top_k,
            "device": ctx.device,
            "eos_ids": stops,
            "add_special_tokens": fmt.add_special_tokens,
        }
        prompts = fmt.render(tokenizer, [r["prompt"] for r in rows])
        if vllm_engine is not None:
            roll = vllm_engine.generate(tokenizer, prompts, **sampling)
        else:
            roll = generate(model, tokenizer, prompts, autocast=ctx.autocast(), **sampling)
        t_gen = time.perf_counter() - t_roll
        scores = torch.tensor(task.score(roll.texts, rows), dtype=torch.float32).view(len(rows), -1)
        t_score = time.perf_counter() - t_roll - t_gen
        all_scores = gather_rewards(scores.to(ctx.device)).cpu()
        all_advantages = compute_advantages(
            all_scores,
            group,
            weights,
            aggregation=algo.multi_objective_aggregation,
            scale_rewards=algo.scale_rewards,
        )
        advantages = local_rows(all_advantages, ctx.rank, ctx.world_size).to(ctx.device)
        mask = roll.completion_mask.clone()
        if algo.mask_truncated_completions:
            mask = mask * (~roll.truncated).long().unsqueeze(1)

        input_ids, attn = roll.input_ids, roll.attention_mask
        keep = roll.completion_ids.size(1)
        use_is = algo.vllm_is_correction and roll.sampler_logps is not None
        need_old = n_mini > 1 or algo.num_iterations > 1 or use_is
        with torch.no_grad(), ctx.autocast():
            old = completion_logprobs(model, input_ids, attn, keep, algo.temperature, micro) if need_old else None
            ref_lp = (
                completion_logprobs(ref, input_ids, attn, keep, algo.temperature, micro) if ref is not None else None
            )
        is_weights = None
        if use_is and old is not None and roll.sampler_logps is not None:
            is_weights = truncated_is_weights(old.float(), roll.sampler_logps, mask, algo.vllm_is_cap)

        model.train()
        rows_per_mini = len(rows) // n_mini
        losses, kls, clips, norms, entropies = [], [], [], [], []
        for _ in range(algo.num_iterations):
            for m in range(n_mini):
                sl = slice(m * rows_per_mini, (m + 1) * rows_per_mini)
                tokens_rank = _global_sum(float(mask[sl].sum()), ctx.device) / ctx.world_size
                starts = list(range(sl.start, sl.stop, micro))
                for i, s in enumerate(starts):
                    mb = slice(s, min(s + micro, sl.stop))
                    sync = i == len(starts) - 1
                    guard = _grad_sync(model, sync)
                    with guard:
                        with ctx.autocast():
                            lp, ent = completion_logprobs_and_entropy(
                                model, input_ids[mb], attn[mb], keep, algo.temperature
                            )
                        out = grpo_loss(
                            lp.float(),
                            advantages[mb],
                            mask[mb],
                            old_logps=None if old is None else old[mb].float(),
                            ref_logps=None if ref_lp is None else ref_lp[mb].float(),
                            loss_type=algo.loss_type,
                            beta=algo.beta,
                            kl_ratio_correction=algo.kl_ratio_correction,
                            epsilon_low=algo.epsilon_low,
                            epsilon_high=algo.epsilon_high,
                            max_completion_length=algo.max_completion_length,
                            accum_steps=len(starts),
                            tokens_per_rank=tokens_rank,
                            is_weights=None if is_weights is None else is_weights[mb],
                            entropies=ent if algo.entropy_coeff else ent.detach(),
                            entropy_coeff=algo.entropy_coeff,
                        )
                        ctx.scaler.scale(out.loss).backward()
                    losses.append(float(out.loss.detach()) * (len(starts) if algo.loss_type != "dapo" else 1))
                    kls.append(out.kl)
                    clips.append(out.clip_ratio)
                    entropies.append(out.entropy)
                ctx.scaler.unscale_(optimizer)
                clip = train.grad_clip
                norm = torch.nn.utils.clip_grad_norm_(params, clip if clip else float("inf"))
                norms.append(float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm))
                ctx.scaler.step(optimizer)
                ctx.scaler.update()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
        weights_stale = True
        step += 1

        elapsed = time.perf_counter() - t0
        total_tokens = _global_sum(float(attn.sum()), ctx.device)
        gen_tokens = _global_sum(float(roll.completion_mask.sum()), ctx.device)
        n_global = len(rows) * ctx.world_size
        # dapo's micro-batch losses are shares of one update's token mean: sum them per update.
        loss = sum(losses) / (max(1, len(losses)) if algo.loss_type != "dapo" else len(norms))
        averaged = ctx.all_reduce_mean(
            loss=loss,
            kl=sum(kls) / max(1, len(kls)),
            clip_ratio=sum(clips) / max(1, len(clips)),
            entropy=sum(entropies) / max(1, len(entropies)),
        )
        stats = reward_statistics(all_scores, group, weights, all_advantages, task.reward_names)
        values: dict[str, float] = {
            **averaged,
            "reward_mean": stats.pop("reward"),
            "reward_std": stats.pop("reward_std"),
            **stats,
            "grad_norm": sum(norms) / max(1, len(norms)),
            "lr": float(scheduler.get_last_lr()[0]),
            "tokens_per_s": total_tokens / elapsed,
            "rollout_tokens_per_s": gen_tokens / max(t_gen, 1e-9),
            "completions/mean_length": gen_tokens / n_global,
            "completions/clipped_ratio": _global_sum(float(roll.truncated.sum()), ctx.device) / n_global,
            "distinct_advantages": float(count_distinct_advantages(advantages.cpu(), group)),
            "step_seconds": elapsed,
            "rollout_seconds": t_gen,
            "weight_sync_seconds": t_sync,
            "reward_seconds": t_score,
            "epoch": pos["epoch"] + pos["index"] / max(1, n_rows),
        }
        if is_weights is not None:
            on = mask.bool()
            values["sampling/is_weight_mean"] = ctx.all_reduce_mean(w=float(is_weights[on].mean()))["w"]
        history.append(values)
        ctx.metrics.log(step, **values)
        if step % log_every == 0 or step == 1:
            ctx.print0(
                f"[grpo] step {step}/{max_steps} "
                f"reward {values['reward_mean']:.3f}+-{values['reward_std']:.3f} "
                f"loss {values['loss']:.4f} kl {values['kl']:.4f} len {values['completions/mean_length']:.1f} "
                f"tok/s {values['tokens_per_s']:.0f} {elapsed:.2f}s"
            )

        if eval_every and step % int(eval_every) == 0 and step < max_steps:
            last_eval = evaluate(ctx, model, tokenizer, task, algo, step, fmt, stops)
        if ctx.should_stop():
            ctx.exit_for_requeue(step, state())
        if save_every and step % int(save_every) == 0:
            ctx.checkpoints.save(step, state())

    last_eval = evaluate(ctx, model, tokenizer, task, algo, step, fmt, stops)
    if save_every:
        ctx.checkpoints.save(step, state())
    result = run_result(history, last_eval, task.reward_names)
    for flag in result["flags"]:
        ctx.print0(f"[grpo] WARNING: {flag}")
    ctx.write_json(
        "result.json",
        {
            "entrypoint": task.name,
            "steps": step,
            "strategy_in_effect": strategy,
            "sharded_local_numel": report.local_numel,
            "global_numel": report.global_numel,
            "rollout_engine": engine,
            "prompt_format": fmt.mode,
            "precision": ctx.precision.name,
            **result,
            **task.report,
        },
    )
    return 0


def evaluate(
    ctx: RunContext,
    model: Any,
    tokenizer: Any,
    task: GRPOTask,
    algo: GRPOAlgorithm,
    step: int,
    fmt: PromptFormat,
    stops: list[int],
) -> dict[str, float]:
    """Greedy (or ``eval_temperature``) completions of held-out prompts, scored on rank 0 only.

    Under FSDP every rank joins the all-gather of the weights; only rank 0 then generates (no collectives
    inside), and the other ranks wait at a barrier.
    """
    rows = list(task.eval_rows[: algo.eval_samples])
    if not rows:
        return {}
    results: dict[str, float] = {}
    with unsharded_for_generation(model):
        if ctx.is_main:
            roll = generate(
                model,
                tokenizer,
                fmt.render(tokenizer, [r["prompt"] for r in rows]),
                max_prompt_length=algo.max_prompt_length,
                max_new_tokens=algo.eval_max_new_tokens or algo.max_completion_length,
                temperature=algo.eval_temperature,
                device=ctx.device,
                autocast=ctx.autocast(),
                gather=False,
                eos_ids=stops,
                add_special_tokens=fmt.add_special_tokens,
            )
            if task.evaluate is not None:
                results = task.evaluate(roll.texts, rows)
            else:
                scores = task.score(roll.texts, rows)
                for k, name in enumerate(task.reward_names):
                    results[name] = sum(s[k] for s in scores) / len(scores)
            results.setdefault("mean_length", float(roll.completion_mask.sum()) / len(rows))
            results["empty_rate"] = sum(not t.strip() for t in roll.texts) / len(rows)
            _write_samples(ctx, step, rows, roll.texts)
        ctx.barrier()
    if ctx.is_main:
        ctx.metrics.log(step, **{f"eval/{k}": v for k, v in results.items()})
        ctx.print0(f"[grpo] eval step {step}: " + " ".join(f"{k}={v:.3f}" for k, v in results.items()))
    return results


def _write_samples(ctx: RunContext, step: int, rows: list[dict[str, Any]], texts: list[str]) -> None:
    import json

    with open(ctx.job_dir / "samples.jsonl", "a", encoding="utf-8") as fh:
        for row, text in zip(rows[:8], texts[:8], strict=False):
            fh.write(json.dumps({"step": step, "prompt": row["prompt"], "completion": text}) + "\n")
