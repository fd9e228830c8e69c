"""The training loop shared by ``gputrain.train.bd3lm`` and ``gputrain.train.hdp``.

Reads top to bottom: data → model → optimizer → resume → steps (grad accumulation, preemption, periodic
eval + clip search, checkpoints) → final eval → samples → result.json. Only the layout and the text
encoding differ between BD3-LM and HDP (``Task``).

Data is tokenised once into an in-memory tensor (GSM8K is 7.5k rows), so ``train.num_workers`` has
nothing to do here. The training loss uses t clipped to ``[β, ω]``; the reported ``val_nelbo`` uses t over
[0.001, 1], which is the bound (``val_ppl_bound = exp(val_nelbo)``), per token of real text, with the EMA
weights (``evaluation``). ``result.json`` states the t range, the EMA decay and the weights it scored.
Each departure from the reference training (kuleshov-group/bd3lms) is a switch of ``DiffusionAlgorithm``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gputrain.atomic import write_atomic
from gputrain.contract import phases
from gputrain.contract.kernels import KernelRequest
from gputrain.errors import GputrainError
from gputrain.recipe.algorithms.diffusion import DiffusionAlgorithm
from gputrain.recipe.schema import ModelSpec
from gputrain.train.diffusion.clip_search import clip_candidates
from gputrain.train.diffusion.data import (
    Tokenizer,
    final_answer,
    generate_problems,
    load_gsm8k,
    load_tokenizer,
)
from gputrain.train.diffusion.ema import eval_model, make_ema
from gputrain.train.diffusion.evaluation import Scorer, clip_window, heldout_nelbo, validation_t_range
from gputrain.train.diffusion.export import export_diffusion
from gputrain.train.diffusion.masks import flex_block_mask
from gputrain.train.diffusion.mfu import mfu
from gputrain.train.diffusion.model import DiT, DiTConfig, pad_vocab_moments
from gputrain.train.diffusion.objective import Layout, real_mean, segment_means
from gputrain.train.diffusion.sampler import sample
from gputrain.train.diffusion.schedule import LogLinearSchedule
from gputrain.train.runtime import RunContext, required
from gputrain.train.runtime.kernels import decide
from gputrain.train.runtime.schedule import lr_factor


@dataclass
class Task:
    """What differs between entrypoints: the layout, how a row becomes ids, what a sample shows."""

    name: str
    layout: Layout
    encode: Callable[[Tokenizer, dict[str, str]], list[int]]
    describe: Callable[[Tokenizer, list[int], dict[str, str]], dict[str, Any]]
    prompt: Callable[[Tokenizer, dict[str, str]], tuple[list[int], list[bool]]]  # ids, which are given


def load_rows(ctx: RunContext) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Training and held-out rows; ``data.train_size`` unset means every row (20 000 generated)."""
    data = ctx.recipe.data
    source = data.source
    n_train, n_val = data.train_size or 10**9, required(data.val_size, "data.val_size")
    if source == "generated" or data.format == "generated":
        n_train = min(n_train, 20000)
        return generate_problems(n_train, ctx.seed), generate_problems(max(n_val, 1), ctx.seed + 7919)
    split, fmt = data.split or "train", data.format  # split unset: the training split
    rows = load_gsm8k(source, split, fmt)
    if not Path(source).exists():  # a hub dataset: GSM8K ships a held-out "test" split
        return rows[:n_train], load_gsm8k(source, "test", fmt)[: max(n_val, 1)]
    if len(rows) < 2:
        raise GputrainError(f"data.source {source}: needs at least 2 rows, has {len(rows)}")
    n_val = min(max(n_val, 1), len(rows) // 2)
    return rows[: min(n_train, len(rows) - n_val)], rows[len(rows) - n_val :]


def run(ctx: RunContext, task_for: Callable[[DiffusionAlgorithm, ModelSpec], Task]) -> int:
    algo = ctx.algorithm(DiffusionAlgorithm)
    recipe = ctx.recipe
    train = recipe.train
    task = task_for(algo, recipe.model)
    tok = load_tokenizer(algo.tokenizer, revision=ctx.plan.pinned_commit("model", "gpt2"))
    ctx.print0(f"[diffusion] tokenizer: {tok.name} (vocabulary {tok.vocab_size}, asked {algo.tokenizer})")
    with ctx.phase(f"loading data {ctx.recipe.data.source}",
                   when=ctx.recipe.data.source != "generated"):
        train_rows, val_rows = load_rows(ctx)
    train_x = torch.tensor([task.encode(tok, r) for r in train_rows], dtype=torch.long)
    val_x = torch.tensor([task.encode(tok, r) for r in val_rows], dtype=torch.long)
    device, layout, schedule = ctx.device, task.layout, LogLinearSchedule(algo.noise_eps)
    inputs = layout.training_inputs(device)
    m, n = len(layout.noisy_pos), layout.seq_len

    cfg = DiTConfig(vocab_size=tok.vocab_size, hidden_size=required(recipe.model.hidden_size, "model.hidden_size"),
                    num_layers=required(recipe.model.num_layers, "model.num_layers"),
                    num_heads=required(recipe.model.num_heads, "model.num_heads"),
                    cond_dim=algo.cond_dim, gradient_checkpointing=train.gradient_checkpointing,
                    dropout=algo.dropout, time_conditioning=algo.time_conditioning,
                    shared_modulation=algo.shared_modulation)
    model = DiT(cfg).to(device)
    kernels = decide(KernelRequest(attention=ctx.requested_attention, compile=train.compile,  # type: ignore[arg-type]
                                   precision=ctx.plan.precision, mask="block"), device)
    flex = flex_block_mask(layout.block_ids[layout.noisy_pos], layout.block_ids, device) \
        if kernels.attention == "flex" else None
    ctx.print0(f"[{task.name}] tokenizer={tok.name} V={tok.vocab_size} head={cfg.padded_vocab} n={n} noisy={m} "
               f"blocks="
               f"{layout.num_noisy_blocks} params={sum(p.numel() for p in model.parameters()) / 1e6:.2f}M "
               f"train={len(train_x)} val={len(val_x)}")
    ctx.print0(f"[runtime] kernels: {kernels.label()} ({kernels.reason})")
    ema = make_ema(model, algo.ema)
    if kernels.compile:
        # after the EMA copy: evaluation runs the EMA weights eagerly
        model.compile_blocks(algo.compile_mode)
    ddp = ctx.wrap_ddp(model)
    ctx.seed_per_rank()
    scorer = Scorer(layout, schedule, tok.mask_id, tok.eos_id, inputs, algo.antithetic, algo.loss_on_padding,
                    flex, ctx.autocast, loss_kernel=algo.loss_kernel if algo.loss_kernel != "compiled" or
                    kernels.compile else "torch")  # the compiled loss only where the blocks compile

    batch, accum, world = train.batch_size, train.grad_accum, ctx.world_size
    per_epoch = max(1, len(train_x) // (batch * world * accum))
    total = train.max_steps or per_epoch * (train.epochs or 1)  # the schema requires one of the two
    opt = torch.optim.AdamW(model.parameters(), lr=train.learning_rate, betas=algo.adam_betas,
                            eps=algo.adam_eps, weight_decay=train.weight_decay,
                            fused=device.type == "cuda")  # one kernel per step, as benchmarks/diffusion_mfu.py (#27)
    opt.register_load_state_dict_post_hook(pad_vocab_moments)  # a checkpoint from before the padding (#27)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(train.lr_schedule, train.warmup_steps, total))
    pos: dict[str, Any] = {"epoch": 0, "batch": 0}
    clip = [algo.clip_beta, algo.clip_omega]
    # first_loss is checkpointed so that a resumed run reports step 1's loss, not the first after resume.
    first_loss: float | None = None
    state: dict[str, Any] = {"model": model, "optimizer": opt, "scheduler": sched, "scaler": ctx.scaler,
                             "pos": pos, "clip": clip, "first_loss": first_loss}
    if ema is not None:
        state["ema"] = ema
    step = 0
    if (ckpt := ctx.checkpoints.restore(state, map_location=device)) is not None:
        step, pos, clip = ckpt.step, dict(ckpt.state["pos"]), list(ckpt.state["clip"])
        first_loss = ckpt.state.get("first_loss")  # None from checkpoints of older versions
        state.update(pos=pos, clip=clip, first_loss=first_loss)
        ctx.print0(f"[{task.name}] resumed from step {step} (epoch {pos['epoch']}, batch {pos['batch']})")
    if algo.clip_resample and step == 0:
        ctx.print0(f"[{task.name}] warning: algorithm.clip_resample on from scratch: blocks masked beyond ω are "
                   "never trained; the paper resamples only when fine-tuning from a checkpoint (--resume-from)")

    def batches() -> Any:
        while True:
            g = torch.Generator().manual_seed(ctx.seed * 1000 + pos["epoch"])
            order = torch.randperm(len(train_x), generator=g)[ctx.rank :: world]
            while (pos["batch"] + 1) * batch <= len(order):
                idx = order[pos["batch"] * batch : (pos["batch"] + 1) * batch]
                pos["batch"] += 1
                yield train_x[idx].to(device)
            pos.update(epoch=pos["epoch"] + 1, batch=0)

    def reduce(v: torch.Tensor) -> torch.Tensor:
        if world > 1:
            torch.distributed.all_reduce(v)
        return v

    def evaluate() -> dict[str, float]:
        """Held-out NELBO and (optionally) a new clip window, both with the EMA weights as the reference."""
        net = eval_model(model, ema)
        out = heldout_nelbo(scorer, net, val_x, batch, algo.eval_batches, ctx.seed, ctx.rank, reduce)
        if algo.clip_search:
            best, _ = clip_window(scorer, net, val_x, batch, algo.clip_search_batches,
                                  clip_candidates(algo.clip_search_widths, algo.clip_search_delta), ctx.seed,
                                  ctx.rank, algo.clip_resample, reduce)
            clip[:] = list(best)
            out |= {"clip_beta": best[0], "clip_omega": best[1]}
        out["ppl_bound"] = math.exp(min(out["nelbo"], 50.0))
        return {f"val_{k}" if not k.startswith("clip") else k: v for k, v in out.items()}

    eval_every = train.eval_every
    log_every, save_every = train.log_every, train.save_every
    model.train()
    stream = batches()
    peak_tflops = ctx.plan.gpu.tflops_bf16 if device.type == "cuda" else None  # the catalog's, via the plan
    tic, seen = time.perf_counter(), 0
    warm_up = True  # the first step in this process: compile (when on) and allocator warm-up, timed on its own
    startup: float | None = None
    first_phase = f"first step (compile {'on' if kernels.compile else 'off'} + warm-up)"
    if step < total:
        ctx.print0(phases.start_line(first_phase))  # its end is printed with the first step's time
    while step < total:
        total_loss, seg_acc = 0.0, {k: 0.0 for k in layout.segments}
        for micro in range(accum):
            sync = micro == accum - 1 or not hasattr(ddp, "no_sync")
            with nullcontext() if sync else ddp.no_sync():  # type: ignore[operator]
                per_tok, real = scorer.terms(ddp, next(stream), clip[0], clip[1], resample=algo.clip_resample)
                loss = real_mean(per_tok, real) / accum
                ctx.scaler.scale(loss).backward()
            total_loss += float(loss.detach())
            for k, v in segment_means(per_tok.detach(), layout, real).items():
                seg_acc[k] += float(v) / accum
        grad_norm = _step(ctx, opt, model)
        if ema is not None:
            ema.update_parameters(model)
        sched.step()
        step += 1
        seen += batch * accum
        if first_loss is None:
            first_loss = state["first_loss"] = total_loss
        if warm_up:  # excluded from the step time and throughput: a start-up cost, logged as its own phase
            warm_up, startup = False, time.perf_counter() - tic  # logged with the next record (same lines)
            ctx.print0(phases.end_line(first_phase, startup))
            ctx.print0(f"[{task.name}] first step (compile {'on' if kernels.compile else 'off'} + warm-up): "
                       f"{startup:.1f} s, not counted in the step time")
            if step % log_every and step != total:  # else this step's own record carries it
                tic, seen = time.perf_counter(), 0
        if step % log_every == 0 or step == total:
            dt = time.perf_counter() - tic
            seq_s = seen / dt
            rec: dict[str, float] = {"loss": total_loss, "lr": float(sched.get_last_lr()[0]),
                                     "grad_norm": grad_norm, "tokens_per_s": seq_s * n * world,
                                     "samples_per_s": seq_s * world, "epoch": pos["epoch"] + pos["batch"] /
                                     max(1, len(train_x) // (batch * world))}
            if startup is not None:
                rec["compile_seconds"], startup = startup, None
            if len(layout.segments) > 1:
                rec |= {f"loss_{k}": v for k, v in seg_acc.items()}  # clipped t: an estimate, not the NELBO
            util = mfu(cfg, m + n, round(m * (clip[0] + clip[1]) / 2), seq_s, peak_tflops)  # head: masked rows
            if util is not None:
                rec["mfu"] = util
            if device.type == "cuda":
                rec["gpu_mem_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
            ctx.metrics.log(step, **rec)
            ctx.print0(f"[{task.name}] step {step}/{total} " + " ".join(f"{k}={v:.4g}" for k, v in rec.items()))
            tic, seen = time.perf_counter(), 0
        if eval_every and step % int(eval_every) == 0 and step < total:
            with ctx.phase(f"evaluation at step {step}"):
                ev = evaluate()
            ctx.metrics.log(step, **ev)
            ctx.print0(f"[{task.name}] eval step {step} " + " ".join(f"{k}={v:.4g}" for k, v in ev.items()))
        if ctx.should_stop():  # after the step's evaluation: it may move the clip window the next steps use
            ctx.exit_for_requeue(step, state)
        if save_every and step % int(save_every) == 0:
            ctx.checkpoints.save(step, state)

    with ctx.phase("final evaluation"):
        final = evaluate()
    ctx.metrics.log(step, **final)
    ctx.print0(f"[{task.name}] final " + " ".join(f"{k}={v:.4g}" for k, v in final.items()))
    if train.save_every:
        ctx.checkpoints.save(step, state)
    result: dict[str, Any] = {"entrypoint": task.name, "steps": step, "first_train_loss": first_loss,
                              "clip": clip, "ln_vocab": math.log(tok.vocab_size), **final,
                              "val_t_range": list(validation_t_range()), "val_tokens": "real" if not
                              algo.loss_on_padding else "all positions", "ema": algo.ema,
                              "eval_weights": "ema" if ema is not None else "raw",
                              "time_conditioning": algo.time_conditioning,
                              "kernels": kernels.model_dump()}
    if ctx.is_main and algo.num_samples:
        result |= write_samples(ctx, task, eval_model(model, ema), tok, schedule, algo, val_rows)
    if ctx.is_main:  # the weights result.json scored, as safetensors + config.json (export.py)
        tok_info = {"name": tok.name, "vocab_size": tok.vocab_size, "mask_id": tok.mask_id, "eos_id": tok.eos_id}
        out = export_diffusion(eval_model(model, ema), layout, schedule, tok_info, ctx.job_dir,
                               {"entrypoint": task.name, "steps": step, "weights": result["eval_weights"]})
        result["export"] = {"path": out.name, "format": "safetensors", "loader":
                            "gputrain.train.diffusion.export.load_pretrained"}
        ctx.print0(f"[{task.name}] exported the {result['eval_weights']} weights to {out}")
    ctx.barrier()
    ctx.write_json("result.json", result)
    return 0


def _step(ctx: RunContext, opt: torch.optim.Optimizer, model: torch.nn.Module) -> float:
    """Unscale, clip, step — the backward already ran per micro-batch (gradient accumulation)."""
    scaler = ctx.scaler
    scaler.unscale_(opt)
    clip = ctx.recipe.train.grad_clip
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip if clip else float("inf"))
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    return float(norm)


def write_samples(ctx: RunContext, task: Task, model: torch.nn.Module, tok: Tokenizer, schedule: LogLinearSchedule,
                  algo: DiffusionAlgorithm, val_rows: list[dict[str, str]]) -> dict[str, float]:
    """Rank 0 samples ``num_samples`` sequences into ``samples.jsonl``; HDP also scores final answers."""
    k = algo.num_samples
    rows = [val_rows[i % len(val_rows)] for i in range(k)]
    prompts = [task.prompt(tok, r) for r in rows]
    prompt = torch.tensor([p[0] for p in prompts])
    given = torch.tensor([p[1] for p in prompts])
    gen = torch.Generator().manual_seed(ctx.seed)
    with ctx.autocast():
        out = sample(model, task.layout, schedule, tok.mask_id, k, algo.sampling_steps, ctx.device, prompt=prompt,
                     given=given, generator=gen, temperature=algo.sample_temperature,
                     first_hitting=algo.first_hitting, nucleus_p=algo.nucleus_p, eos_id=tok.eos_id)
    records = [task.describe(tok, ids, row) for ids, row in zip(out.tolist(), rows, strict=True)]
    lines = "".join(json.dumps(r) + "\n" for r in records)
    write_atomic(ctx.job_dir / "samples.jsonl", lines)
    stats = {"samples": float(k), "sample_answer_accuracy": sum(bool(r.get("correct")) for r in records) / k}
    ctx.print0(f"[{task.name}] wrote {k} samples to {ctx.job_dir / 'samples.jsonl'}")
    return stats


def answer_matches(text: str, row: dict[str, str]) -> bool:
    got, want = final_answer(text), final_answer(row["answer"])
    return got is not None and got == want
