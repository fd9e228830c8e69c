"""The GRPO training loop shared by grpo_code, grpo_math and gdpo; reads top to bottom in ``train_grpo``.

One step is three phases (``gputrain.train.grpo.phases``): **rollout** -- every rank samples its share of
``train_batch_size`` prompts, generates G completions each through a :class:`~gputrain.train.grpo.engines.
RolloutEngine`, scores them with the task's reward components; rewards are gathered from all ranks and
turned into advantages (``advantages.compute_advantages``: group or batch scaling, GRPO or GDPO
aggregation); **update** -- ``num_iterations`` passes over the batch in mini-batches of
``ppo_mini_batch_size`` prompts, each one optimizer update (``RunContext.step_optimizer``) built from
micro-batches of ``train.batch_size`` completions (clipped ratio + β·k3 KL to a frozen reference,
``gputrain.train.grpo.loss``); **metrics** -- one ``metrics.jsonl`` record, averaged over ranks.

Everything distributed goes through the shared runtime (``gputrain.train.runtime``): process group,
precision (fp16 + GradScaler, bf16, fp32 on CPU), ``metrics.jsonl``, checkpoints that resume, preemption
(checkpoint, PREEMPTED, exit 75). Evaluation runs on rank 0 only while the others wait.

Rollouts use HF ``generate`` or a colocated vLLM engine (``rollout.pick_engine``; ``vllm_engine``). With
vLLM, the policy's weights are pushed into it once after start/resume and after each step's optimizer
updates, before the next rollout (no rollout happens between the updates of one step, so one push per
step is enough); ``weight_sync_seconds`` records its cost next to ``rollout_tokens_per_s``.

Compile is start-up, not step time (#27): a step in which torch's compiler ran (FlexAttention's first call
with ``algorithm.sequence_packing`` on CUDA, a recompile for a new bin shape, ``train.compile``'s layers, HF
generate's decode step with the static KV cache, ``algorithm.generate_cache``: first rollout)
logs ``compile_seconds`` (``runtime.compile_clock``: dynamo's own compile-time totals, the largest over the
ranks). Its ``step_seconds`` stays the step's wall time (the ``[grpo] step`` line is unchanged), and
``perf.json``'s step time, the one the planner calibrates from, leaves it out with the process's first step
(``gputrain.contract.perf.steady_steps``); ``result.json`` carries ``compile_seconds`` (the run's total) and
``steady_step_seconds``. The steps left out are the warm-up, a phase of its own as in the diffusion trainers:
``[phase] first step (warm-up ...)`` lines around the first step, and ``warmup_seconds`` (their wall time,
the compile included) in ``perf.json``, ``result.json`` and ``gputrain logs``.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import torch

from gputrain.contract import phases
from gputrain.contract.needs import BUILTIN_MODELS
from gputrain.errors import GputrainError
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.train.grpo.engines import HFEngine, RolloutEngine, Sampling, VLLMRolloutEngine
from gputrain.train.grpo.export import MODEL_DIR, export_policy
from gputrain.train.grpo.independence import independence_flags, prompt_independence
from gputrain.train.grpo.lora import AdapterOffReference, apply_lora, lora_report
from gputrain.train.grpo.phases import Policy, rollout_phase, step_metrics, update_phase
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
from gputrain.train.grpo.warm_start import copy_into_reference, warm_start
from gputrain.train.runtime import RunContext
from gputrain.train.runtime.compile_clock import CompileClock
from gputrain.train.runtime.dist import max_float
from gputrain.train.runtime.schedule import lr_factor


def batch_sizes(algo: GRPOAlgorithm, world: int) -> tuple[int, int]:
    """(train_batch_size, ppo_mini_batch_size) in prompts, global, as the plan resolved them
    (``gputrain.planner.workload_rl.step_prompts`` is the one home of that sum); both multiples of the world."""
    train_bs, mini_bs = algo.train_batch_size, algo.ppo_mini_batch_size
    if train_bs is None or mini_bs is None:
        raise GputrainError("the plan leaves algorithm.train_batch_size or ppo_mini_batch_size unresolved (a plan "
                            "of an earlier gputrain): plan the recipe again")
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


def build_policy(ctx: RunContext, task: GRPOTask) -> tuple[Any, Any, Any | None, str, dict[str, Any] | None]:
    """(policy, tokenizer, frozen reference or None, strategy in effect, LoRA report or None), wrapped for the
    world size."""
    algo = ctx.algorithm(GRPOAlgorithm)
    recipe = ctx.recipe
    revision = ctx.plan.pinned_commit("model", recipe.model.name)  # offline clusters: what prepare fetched
    tokenizer = policy_tokenizer(recipe.model, task.corpus, revision=revision,
                                 chat=algo.prompt_format != "raw")
    model = build_model(recipe.model, tokenizer, attention=recipe.train.attention, seed=ctx.seed,
                        revision=revision)
    model.to(ctx.device)
    lora = recipe.model.lora_rank is not None
    ref = None
    if algo.beta > 0 and not lora:  # LoRA: the policy with its adapters off, once wrapped (below)
        ref = copy.deepcopy(model).eval().requires_grad_(False)
        if ctx.precision.name != "fp32":
            ref.to(ctx.precision.dtype)
    if recipe.train.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    model = apply_lora(model, recipe.model)  # after checkpointing: peft wraps the layers it configured
    if (lora_info := lora_report(model, recipe.model)) is not None:
        ctx.print0(f"[grpo] LoRA r={lora_info['rank']} alpha={lora_info['alpha']} on "
                   f"{lora_info['target_modules']}: {lora_info['trainable_params']} trainable, "
                   f"{lora_info['frozen_params']} frozen; reference = base with adapters off")
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
    if lora and algo.beta > 0:
        ref = AdapterOffReference(model)
    return model, tokenizer, ref, in_effect, lora_info


def generate_cache(ctx: RunContext, algo: GRPOAlgorithm) -> str:
    """HF generate's KV cache for the rollouts: the one resolver's choice (``contract.kernels.
    resolve_generate_cache``, which the planner calls too) on this node's facts, said in the log."""
    from gputrain.contract.kernels import resolve_generate_cache
    from gputrain.train.runtime.kernels import detect_facts

    sharded = ctx.world_size > 1 and ctx.recipe.distributed.strategy == "fsdp"
    cache, why = resolve_generate_cache(algo.generate_cache, detect_facts(ctx.device), sharded=sharded)
    ctx.print0(f"[grpo] generate: {why}")
    return cache


def _engine(ctx: RunContext, policy: Policy, algo: GRPOAlgorithm) -> tuple[RolloutEngine, str]:
    """The rollout engine the plan allows (``rollout.pick_engine``), behind the :class:`RolloutEngine` protocol."""
    name, note = pick_engine(algo.rollout_engine, ctx.device, ctx.recipe.memory.vllm_gpu_memory_utilization)
    if name == "vllm" and ctx.recipe.model.lora_rank is not None:  # vLLM would need the merged weights each step
        if algo.rollout_engine == "vllm":
            raise GputrainError("algorithm.rollout_engine vllm with model.lora_rank: LoRA rollouts run on HF "
                                "generate only for now; set algorithm.rollout_engine to hf or auto")
        name, note = "hf", "HF generate (LoRA: the vLLM weight push of adapters is not wired yet)"
    if name != "vllm":
        return HFEngine(policy.model, policy.tokenizer, ctx.device, ctx.autocast, generate_cache(ctx, algo)), note
    from gputrain.train.grpo.vllm_engine import engine_from_context

    vllm = engine_from_context(ctx, policy.model, policy.tokenizer, algo)
    for line in vllm.notes:
        ctx.print0(f"[grpo] vLLM {vllm.version}: {line}")
    return VLLMRolloutEngine(vllm, policy.tokenizer, ctx.device), note


def train_grpo(ctx: RunContext, task: GRPOTask) -> int:
    """Train ``task`` with GRPO from the resolved plan; returns the process exit code (0).

    Set-up (batch sizes, policy, engine, prompt format, optimizer, resume), then per step the three phases
    of ``gputrain.train.grpo.phases`` -- rollout, update, metrics -- then evaluation, preemption and
    checkpoints; at the end ``result.json`` (``results.run_result`` plus ``task.final_report()``).
    """
    algo = ctx.algorithm(GRPOAlgorithm)
    train = ctx.recipe.train
    train_bs, mini_bs = batch_sizes(algo, ctx.world_size)
    group, n_mini = algo.num_generations, train_bs // mini_bs
    local_prompts = train_bs // ctx.world_size
    n_rows = len(task.train_rows)
    if n_rows < train_bs:
        raise GputrainError(f"{task.name}: {n_rows} training prompts, fewer than train_batch_size {train_bs}")
    max_steps = train.max_steps or (train.epochs or 1) * (n_rows // train_bs)  # the schema requires one of them
    weights = list(algo.reward_weights or [1.0] * len(task.reward_names))

    name = ctx.recipe.model.name
    with ctx.phase(f"loading model {name}", when=name.lower() not in BUILTIN_MODELS):  # a hub checkpoint
        model, tokenizer, ref, strategy, lora_info = build_policy(ctx, task)
    ctx.seed_per_rank()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=train.learning_rate, weight_decay=train.weight_decay)
    total_updates = max_steps * n_mini * algo.num_iterations
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_factor(train.lr_schedule, train.warmup_steps, total_updates)
    )
    policy = Policy(model, tokenizer, ref, optimizer, scheduler, params)
    engine, engine_note = _engine(ctx, policy, algo)
    ctx.print0(f"[grpo] rollout engine: {engine_note}")
    fmt = resolve_prompt_format(algo.prompt_format, tokenizer, algo.system_prompt)
    if fmt.mode == "raw" and getattr(tokenizer, "chat_template", None):
        ctx.print0("[grpo] warning: algorithm.prompt_format=raw but the model has a chat template: its prompts "
                   "are not what it was tuned on (use auto or chat)")
    if task.check_prompts is not None:
        first = list(task.train_rows[:4])
        task.check_prompts(fmt.render(tokenizer, [r["prompt"] for r in first]), first)
    stops = stop_token_ids(tokenizer, getattr(unwrap(model), "generation_config", None))
    ctx.print0(f"[grpo] prompts: {fmt.mode}{' with a system turn' if fmt.system else ''}; stop ids {stops}")
    sampling = Sampling(algo.max_prompt_length, algo.max_completion_length, algo.temperature, algo.top_p,
                        algo.top_k, stops, fmt.add_special_tokens)
    report = sharding_report(model, strategy)
    ctx.print0(
        f"[grpo] {task.name}: params={report.global_numel} "
        f"strategy={strategy} (local numel {report.local_numel}/{report.global_numel}) engine={engine.name} "
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
    warm = None
    if algo.warm_start_steps and ckpt is None:  # a checkpoint already holds the warmed-up weights
        warm = _warm_start(ctx, policy, task, algo, fmt, stops)
        engine.weights_changed()
        if ref is not None and lora_info is None:  # LoRA: the reference is the base, adapters off
            ctx.print0(f"[grpo] KL reference = the warmed-up policy ({copy_into_reference(ref, model)} tensors)")

    def state() -> dict[str, Any]:
        full = save_full_state(model, optimizer)
        return {**full, "scheduler": scheduler, "scaler": ctx.scaler, "pos": dict(pos)}

    last_eval: dict[str, float] = {}
    history: list[dict[str, float]] = []
    compile_total = 0.0
    hacking: list[str] = []  # prompt-independence flags: last rollout (this rank's share) and final evaluation
    last_batch: tuple[list[str], list[str]] = ([], [])
    clock = CompileClock()
    # the process's first step is start-up (allocator, CUDA context, generate's first call, FlexAttention's
    # compile with packing on CUDA): a phase of its own, as in the diffusion trainers (#27)
    static = getattr(engine, "cache", None) == "static" and ctx.device.type == "cuda"  # transformers compiles it
    compiles = (algo.sequence_packing and ctx.device.type == "cuda") or bool(train.compile) or static
    first_phase = f"first step (warm-up{' + compile' if compiles else ''})"
    if step < max_steps:
        ctx.print0(phases.start_line(first_phase))
    while step < max_steps:
        if pos["index"] + train_bs > n_rows:
            pos = {"epoch": pos["epoch"] + 1, "index": 0}
        chosen = _prompt_order(n_rows, ctx.seed, pos["epoch"])[pos["index"] : pos["index"] + train_bs]
        mine = chosen[ctx.rank * local_prompts : (ctx.rank + 1) * local_prompts]
        rows = [task.train_rows[i] for i in mine for _ in range(group)]
        pos = {"epoch": pos["epoch"], "index": pos["index"] + train_bs}

        clock.lap()  # what compiled before this step (evaluation, warm start) is not the step's
        batch = rollout_phase(ctx, task, policy, engine, fmt, sampling, rows, weights=weights, n_mini=n_mini)
        last_batch = ([r["prompt"] for r in batch.rows], list(batch.roll.texts))
        stats = update_phase(ctx, policy, batch, n_mini)
        engine.weights_changed()
        step += 1
        compiled = max_float(clock.lap(), ctx.device)  # the step waited for the slowest rank's compile
        values = step_metrics(ctx, task, policy, batch, stats, weights=weights,
                              epoch=pos["epoch"] + pos["index"] / max(1, n_rows))
        if compiled > 0:
            values["compile_seconds"] = compiled
            compile_total += compiled
        history.append(values)
        ctx.metrics.log(step, **values)
        if len(history) == 1:
            ctx.print0(phases.end_line(first_phase, values["step_seconds"]))
        if step % train.log_every == 0 or step == 1:
            ctx.print0(
                f"[grpo] step {step}/{max_steps} "
                f"reward {values['reward_mean']:.3f}+-{values['reward_std']:.3f} "
                f"loss {values['loss']:.4f} kl {values['kl']:.4f} len {values['completions/mean_length']:.1f} "
                f"tok/s {values['tokens_per_s']:.0f} {values['step_seconds']:.2f}s"
            )
            ctx.print0(  # a text line for the log parsers (no "step N"): the numbers are in metrics.jsonl
                f"[grpo] tokens ({'packed' if algo.sequence_packing else 'padded'}): {values['tokens/real']:.0f} "
                f"real; the log-prob passes processed {values['tokens/logprob_processed']:.0f}, the update "
                f"passes {values['tokens/update_processed']:.0f}"
            )
        if compiled > 0:  # no "step N" in it: the step's numbers are in the line above and metrics.jsonl
            ctx.print0(f"[grpo] compile + warm-up: torch's compiler ran {compiled:.1f} s of this "
                       f"{values['step_seconds']:.1f} s step; left out of the steady step time")

        if train.eval_every and step % int(train.eval_every) == 0 and step < max_steps:
            with ctx.phase(f"evaluation at step {step}"):
                last_eval = evaluate(ctx, model, tokenizer, task, algo, step, fmt, stops)
        if ctx.should_stop():
            ctx.exit_for_requeue(step, state())
        if train.save_every and step % int(train.save_every) == 0:
            ctx.checkpoints.save(step, state())

    with ctx.phase("final evaluation"):
        last_eval = evaluate(ctx, model, tokenizer, task, algo, step, fmt, stops, flags_out=hacking)
    if train.save_every:
        ctx.checkpoints.save(step, state())
    exported = export_policy(model, tokenizer, ctx.job_dir, is_main=ctx.is_main)  # collective
    if exported is not None:
        ctx.print0(f"[grpo] policy saved for transformers: {exported} (AutoModelForCausalLM.from_pretrained)")
    result = run_result(history, last_eval, task.reward_names)
    if last_batch[0]:
        rollout = prompt_independence(*last_batch, task.answer_of)
        tail = {n: v["last10"] for n, v in result["rewards"].items() if v["last10"] is not None}
        hacking = independence_flags(rollout, tail, where="last rollout") + hacking
        result.update({f"rollout_{k}": v for k, v in rollout.items()})
    result["flags"] = list(result["flags"]) + hacking
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
            "rollout_engine": engine.name,
            # HF generate's KV cache in effect at the end, and why a static cache fell back (null: it did not)
            "generate_cache": getattr(engine, "cache", None),
            "generate_cache_fallback": getattr(engine, "fallback", None),
            "prompt_format": fmt.mode,
            "model_dir": MODEL_DIR,  # save_pretrained folder: safetensors, config, tokenizer, chat template
            "lora": lora_info,  # null without LoRA
            "warm_start": warm,  # null without algorithm.warm_start_steps (or on a resumed run)
            "precision": ctx.precision.name,
            "compile_seconds": round(compile_total, 3),  # start-up, not in steady_step_seconds
            "steady_step_seconds": steady_step_seconds(history),
            "warmup_seconds": warmup_seconds(history),  # the steps steady_step_seconds leaves out, compile included
            **result,
            **task.report,
            **(task.final_report() if task.final_report is not None else {}),
        },
    )
    return 0


def _steady(history: list[dict[str, float]]) -> tuple[list[float], list[float]]:
    """(every step's seconds, the steady ones): ``perf.json``'s rule (``contract.perf.steady_steps``: not the
    first step, not a step that compiled)."""
    from gputrain.contract.perf import steady_steps

    logged = [v["step_seconds"] for v in history]
    return logged, steady_steps(logged, [v.get("compile_seconds", 0.0) > 0 for v in history])[0]


def steady_step_seconds(history: list[dict[str, float]]) -> float | None:
    """Median ``step_seconds`` of this process's steady steps."""
    import statistics

    steps = _steady(history)[1]
    return statistics.median(steps) if steps else None


def warmup_seconds(history: list[dict[str, float]]) -> float | None:
    """Wall time of the steps the steady figure leaves out (start-up: ``perf.json``'s ``warmup_seconds``)."""
    logged, steady = _steady(history)
    return round(sum(logged) - sum(steady), 3) if logged else None


def evaluate(
    ctx: RunContext,
    model: Any,
    tokenizer: Any,
    task: GRPOTask,
    algo: GRPOAlgorithm,
    step: int,
    fmt: PromptFormat,
    stops: list[int],
    flags_out: list[str] | None = None,
    prefix: str = "eval",
) -> dict[str, float]:
    """Greedy (or ``eval_temperature``) completions of held-out prompts, scored on rank 0 only.

    Under FSDP every rank joins the all-gather of the weights; only rank 0 then generates (no collectives
    inside), and the other ranks wait at a barrier. With ``flags_out`` (the final evaluation), the
    prompt-independence figures (``independence.prompt_independence``) join the results and their warnings
    are appended to ``flags_out``.
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
            if flags_out is not None:
                flags_out += _independence(task, rows, roll.texts, results)
            _write_samples(ctx, step, rows, roll.texts)
        ctx.barrier()
    if ctx.is_main:
        ctx.metrics.log(step, **{f"{prefix}/{k}": v for k, v in results.items()})
        ctx.print0(f"[grpo] {prefix} step {step}: " + " ".join(f"{k}={v:.3f}" for k, v in results.items()))
    return results


def _warm_start(ctx: RunContext, policy: Policy, task: GRPOTask, algo: GRPOAlgorithm, fmt: PromptFormat,
                stops: list[int]) -> dict[str, Any]:
    """The warm start between two evaluations of the held-out rows (``init_eval/*`` and ``warm_eval/*`` at
    step 0 in ``metrics.jsonl``), so ``result.json`` says what the model scored at init, after the warm start
    and (``eval_*``) after GRPO: what GRPO adds is the last two's difference."""
    model, tokenizer = policy.model, policy.tokenizer
    lr = algo.warm_start_learning_rate or ctx.recipe.train.learning_rate
    with ctx.phase("evaluation before the warm start"):
        before = evaluate(ctx, model, tokenizer, task, algo, 0, fmt, stops, prefix="init_eval")
    with ctx.phase(f"warm start ({algo.warm_start_steps} supervised updates)"):
        figures = warm_start(ctx, model, tokenizer, task.train_rows, task.reference_completion, fmt, stops[0],
                             steps=algo.warm_start_steps, learning_rate=lr,
                             max_prompt_length=algo.max_prompt_length)
    with ctx.phase("evaluation after the warm start"):
        after = evaluate(ctx, model, tokenizer, task, algo, 0, fmt, stops, prefix="warm_eval")
    return {**figures, "eval_before": before, "eval_after": after}


def _independence(task: GRPOTask, rows: list[dict[str, Any]], texts: list[str],
                  results: dict[str, float]) -> list[str]:
    """Prompt-independence figures into ``results`` and their flags; the reward components are scored on the
    same completions when the task has components besides correctness (math), to see form paid without
    substance."""
    from gputrain.train.grpo.independence import CORRECTNESS_NAMES

    figures = prompt_independence([r["prompt"] for r in rows], texts, task.answer_of)
    results.update({k: float(v) for k, v in figures.items() if isinstance(v, float)})
    means: dict[str, float] = {}
    if any(n not in CORRECTNESS_NAMES for n in task.reward_names):
        scores = (task.plain_score or task.score)(texts, rows)  # not GDPO's tracker: no training record
        means = {n: sum(s[k] for s in scores) / len(scores) for k, n in enumerate(task.reward_names)}
    return independence_flags(figures, means, where="final evaluation")


def _write_samples(ctx: RunContext, step: int, rows: list[dict[str, Any]], texts: list[str]) -> None:
    import json

    with open(ctx.job_dir / "samples.jsonl", "a", encoding="utf-8") as fh:
        for row, text in zip(rows[:8], texts[:8], strict=False):
            fh.write(json.dumps({"step": step, "prompt": row["prompt"], "completion": text}) + "\n")
