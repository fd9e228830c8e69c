"""A supervised warm start before GRPO (``algorithm.warm_start_steps``): teach a from-scratch policy the answer form.

Why: GRPO, as TRL, verl and nanochat's ``chat_rl`` run it, starts from a pretrained or SFT model: its only
signal is the spread of rewards within a group, and a random-init policy almost never earns a correctness
reward (the tiny CPU profiles before issue 29: well under 1 % of samples over 80 steps, accuracy 0 for every
seed). A CPU profile cannot download a pretrained model, so it may first fit the task's reference solutions
for a few steps (cross-entropy on the completion tokens only, the prompt rendered exactly as the rollouts
render it, ended by the policy's stop token) -- the SFT stage of those pipelines, done in the job. Opt-in:
recipes that do not set it (every GPU recipe) run as before.

Its own AdamW, thrown away afterwards, so GRPO starts with fresh optimizer state as it would from a
checkpoint. Every rank takes its share of each batch; the wrapped model (FSDP2 or DDP) reduces the
gradients. A resumed run skips it (the checkpoint already holds the warmed-up weights). The KL reference
(``algorithm.beta`` > 0) is then the warmed-up policy (:func:`copy_into_reference`), as TRL's reference is
the SFT model it loads, not the random init the job built; a resumed run's reference is not in the checkpoint
(it is the random init again: not fixed).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from gputrain.errors import GputrainError
from gputrain.train.grpo.prompts import PromptFormat
from gputrain.train.runtime import RunContext

Row = dict[str, Any]


def sft_batch(
    tokenizer: Any, prompts: Sequence[str], targets: Sequence[str], stop_id: int, add_special_tokens: bool,
    max_prompt_length: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, labels) for prompt + target + stop token, right-padded; labels -100 on
    the prompt and the padding, so only the completion is learnt. Prompts are cut from the left to
    ``max_prompt_length`` tokens, as the rollouts cut them."""
    rows: list[tuple[list[int], list[int]]] = []
    for prompt, target in zip(prompts, targets, strict=True):
        p = tokenizer(prompt, add_special_tokens=add_special_tokens)["input_ids"][-max_prompt_length:]
        c = [*tokenizer(target, add_special_tokens=False)["input_ids"], stop_id]
        rows.append((list(p), c))
    width = max(len(p) + len(c) for p, c in rows)
    pad = tokenizer.pad_token_id
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (p, c) in enumerate(rows):
        n = len(p) + len(c)
        ids[i, :n] = torch.tensor(p + c)
        mask[i, :n] = 1
        labels[i, len(p) : n] = torch.tensor(c)
    return ids, mask, labels


def completion_loss(model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the labelled (completion) tokens."""
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1),
                                             ignore_index=-100)


def warm_start(
    ctx: RunContext,
    model: Any,
    tokenizer: Any,
    rows: Sequence[Row],
    target_of: Callable[[Row], str | None] | None,
    fmt: PromptFormat,
    stop_id: int,
    *,
    steps: int,
    learning_rate: float,
    max_prompt_length: int,
) -> dict[str, float]:
    """``steps`` updates of ``train.batch_size`` rows per rank on the rows' reference completions; returns
    the figures ``result.json`` keeps (loss over the first and last 10 updates, seconds)."""
    if target_of is None:
        raise GputrainError("algorithm.warm_start_steps: this entrypoint's task has no reference completions "
                            "to warm up on; set algorithm.warm_start_steps: 0")
    usable = [r for r in rows if target_of(r)]
    micro = ctx.recipe.train.batch_size
    if len(usable) < micro * ctx.world_size:
        raise GputrainError(f"algorithm.warm_start_steps: {len(usable)} rows with a reference solution, fewer "
                            f"than one batch ({micro} per rank x {ctx.world_size} ranks)")
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=ctx.recipe.train.weight_decay)
    rng = random.Random(ctx.seed * 7919 + 17)  # the same draw on every rank; each takes its slice
    losses: list[float] = []
    start = time.perf_counter()
    model.train()
    for step in range(1, steps + 1):
        chosen = rng.sample(range(len(usable)), micro * ctx.world_size)
        mine = [usable[i] for i in chosen[ctx.rank * micro : (ctx.rank + 1) * micro]]
        ids, mask, labels = sft_batch(tokenizer, fmt.render(tokenizer, [r["prompt"] for r in mine]),
                                      [str(target_of(r)) for r in mine], stop_id, fmt.add_special_tokens,
                                      max_prompt_length)
        with ctx.autocast():
            loss = completion_loss(model, ids.to(ctx.device), mask.to(ctx.device), labels.to(ctx.device))
        ctx.scaler.scale(loss).backward()
        ctx.step_optimizer(optimizer, params)
        losses.append(ctx.all_reduce_mean(loss=float(loss.detach()))["loss"])
        if step == 1 or step % 50 == 0 or step == steps:
            ctx.print0(f"[grpo] warm start {step}/{steps} loss {losses[-1]:.4f}")
    optimizer.zero_grad(set_to_none=True)
    head, tail = losses[:10], losses[-10:]
    return {"steps": float(steps), "learning_rate": learning_rate, "loss_first10": sum(head) / len(head),
            "loss_last10": sum(tail) / len(tail), "seconds": time.perf_counter() - start}


@torch.no_grad()
def copy_into_reference(ref: torch.nn.Module, policy: torch.nn.Module) -> int:
    """Copy the policy's weights into the frozen KL reference, parameter by parameter; returns how many.

    Both were built from one model (``copy.deepcopy`` before wrapping) and are sharded alike under FSDP2,
    so each reference parameter takes its own shard of the policy's (DTensor ``copy_``, no collective); a
    DDP policy is unwrapped first (the reference is not wrapped). Every name must match: a reference that
    silently kept some random-init weights would anchor GRPO to noise."""
    from gputrain.train.grpo.sharding import unwrap

    source = dict(unwrap(policy).named_parameters())
    names = [name for name, _ in ref.named_parameters()]
    if sorted(names) != sorted(source):
        raise GputrainError("the KL reference and the policy have different parameters: cannot make the "
                            "warmed-up policy the reference")
    for name, param in ref.named_parameters():
        param.copy_(source[name])
    return len(names)
