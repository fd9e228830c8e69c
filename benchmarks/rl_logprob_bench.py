"""RL passes on a random-init Qwen2 policy: padded vs packed log-prob/update passes, HF generate caches.

    python benchmarks/rl_logprob_bench.py            # GPU: 0.5B (24 × 1280), 64 sequences, bf16
    python benchmarks/rl_logprob_bench.py --smoke    # CPU: a tiny model, fp32
    python benchmarks/rl_logprob_bench.py --packed flex --no-generate   # packing through FlexAttention (#27)

The batch looks like a GRPO rollout: prompts of 16-64 tokens (left-padded), completions of 16-256 tokens
(right-padded), lengths drawn at random. Reports tokens processed and real tokens/s of the padded passes
(``gputrain.train.grpo.loss``, micro-batches of ``--micro`` rows) and of the packed ones
(``gputrain.train.grpo.packing``, rows of ``micro × width`` tokens: the same memory bound), the largest
log-prob difference between them, and HF ``generate`` tokens/s with the dynamic and the static KV cache
(``--generate-only --gen-rows 64 --new-tokens 256``: at the GPU suite's GRPO rollout shape, 64 × 256).
``--packed flex``: the packed passes through FlexAttention with a document mask
(``gputrain.train.grpo.packing_flex``) instead of the 4-D mask, plus, on a GPU, the fp32 gradients of a tiny
policy against the padded pass (torch has no FlexAttention backward on the CPU). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import torch

from gputrain.train.grpo.loss import completion_logprobs, completion_logprobs_and_entropy
from gputrain.train.grpo.packing import packed_completion_logprobs, packed_tokens
from gputrain.train.grpo.packing_flex import flex_packed_completion_logprobs


def timed(fn: Any, sync: Any) -> tuple[Any, float]:
    sync()
    tic = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - tic


def flex_grad_check(dev: torch.device) -> dict[str, float]:
    """fp32 gradients of a tiny policy: padded update vs the FlexAttention-packed one (max abs, max rel)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    cfg._attn_implementation = "sdpa"
    model = Qwen2ForCausalLM(cfg).to(dev)
    ids = torch.randint(1, 64, (8, 24), device=dev)
    mask = torch.zeros_like(ids)
    for r in range(8):
        mask[r, 8 - 2 - r % 6 : 8 + 1 + (3 * r) % 16] = 1
    ids = ids * mask
    comp = mask[:, 8:].float()
    grads = []
    for packed in (False, True):
        model.zero_grad()
        lp = flex_packed_completion_logprobs(model, ids, mask, 16, max_tokens=48)[0] if packed else \
            completion_logprobs(model, ids, mask, 16)
        (lp * comp).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    diff = (grads[0] - grads[1]).abs()
    return {"flex_grad_fp32_max_abs_diff": float(diff.max()),
            "flex_grad_fp32_max_rel_diff": float(diff.max() / grads[0].abs().max())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--micro", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--packed", choices=["sdpa", "flex"], default="sdpa", help="attention of the packed passes")
    ap.add_argument("--no-generate", action="store_true", help="skip the HF generate measurements")
    ap.add_argument("--generate-only", action="store_true", help="only the HF generate measurements")
    ap.add_argument("--gen-rows", type=int, default=0, help="sequences per generate call (default: --micro)")
    args = ap.parse_args()
    packed_fn = flex_packed_completion_logprobs if args.packed == "flex" else packed_completion_logprobs
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cuda = torch.cuda.is_available() and not args.smoke
    dev = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    if cuda:
        cfg = Qwen2Config(vocab_size=512, hidden_size=1280, intermediate_size=3456, num_hidden_layers=24,
                          num_attention_heads=20, num_key_value_heads=20, max_position_embeddings=1024)
        n_seq, p_rng, c_rng = 64, (16, 64), (16, 256)
    else:
        cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2)
        n_seq, p_rng, c_rng = 8, (2, 6), (1, 10)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to(dev, dtype)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    pw, cw = p_rng[1], c_rng[1]
    ids = torch.randint(1, cfg.vocab_size, (n_seq, pw + cw), device=dev)
    mask = torch.zeros_like(ids)
    for r in range(n_seq):
        p = int(torch.randint(p_rng[0], p_rng[1] + 1, ()))
        c = int(torch.randint(c_rng[0], c_rng[1] + 1, ()))
        mask[r, pw - p : pw + c] = 1
    ids = ids * mask
    real = int(mask.sum())
    packed_n, padded_n = packed_tokens(mask, args.micro * ids.shape[1])
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(dev) if cuda else "cpu", "sequences": n_seq,
                           "width": ids.shape[1], "real_tokens": real, "padded_tokens_processed": padded_n,
                           "packed_tokens_processed": packed_n, "micro_rows": args.micro,
                           "packed_attention": args.packed}
    if not args.generate_only:
        out |= passes(args, model, ids, mask, (pw, cw), packed_fn, sync, cuda, dev)
    if args.no_generate:
        print(json.dumps(out))
        return 0
    generate_caches(args, model, ids, mask, pw, sync, cuda, out)  # prints ``out`` after each cache
    return 0


def passes(args: Any, model: Any, ids: torch.Tensor, mask: torch.Tensor, widths: tuple[int, int], packed_fn: Any,
           sync: Any, cuda: bool, dev: torch.device) -> dict[str, Any]:
    """Padded vs packed log-prob and update passes over the whole batch."""
    out: dict[str, Any] = {}
    (pw, cw), n_seq = widths, ids.shape[0]
    real, budget = int(mask.sum()), args.micro * ids.shape[1]
    model.eval()
    with torch.no_grad():
        completion_logprobs(model, ids[: args.micro], mask[: args.micro], cw, 1.0, args.micro)  # warm-up
        pad_lp, t_pad = timed(lambda: completion_logprobs(model, ids, mask, cw, 1.0, args.micro), sync)
        warm = slice(None) if args.packed == "flex" else slice(0, args.micro)  # flex: compile at the timed shapes
        packed_fn(model, ids[warm], mask[warm], cw, max_tokens=budget)
        (pack_lp, _), t_pack = timed(lambda: packed_fn(model, ids, mask, cw, max_tokens=budget), sync)
    comp = mask[:, pw:].bool()
    out["logprob_max_abs_diff"] = float((pad_lp.float() - pack_lp.float()).abs()[comp].max())
    out["logprob_padded_s"], out["logprob_packed_s"] = round(t_pad, 4), round(t_pack, 4)
    out["logprob_padded_real_tokens_per_s"] = round(real / t_pad)
    out["logprob_packed_real_tokens_per_s"] = round(real / t_pack)

    model.train()

    def update_padded() -> None:
        for s in range(0, n_seq, args.micro):
            lp, _ = completion_logprobs_and_entropy(model, ids[s : s + args.micro], mask[s : s + args.micro], cw)
            (lp.float() * comp[s : s + args.micro]).sum().backward()

    def update_packed() -> None:
        lp, _ = packed_fn(model, ids, mask, cw, max_tokens=budget, entropy=True)
        (lp.float() * comp).sum().backward()

    _, t_upd_pad = timed(update_padded, sync)
    model.zero_grad(set_to_none=True)
    if args.packed == "flex" and not cuda:
        out["update_packed_note"] = "FlexAttention has no backward on the CPU: update not measured"
    else:
        if args.packed == "flex":
            update_packed()  # warm-up: compiles the backward
            model.zero_grad(set_to_none=True)
        _, t_upd_pack = timed(update_packed, sync)
        out["update_packed_s"] = round(t_upd_pack, 4)
        out["update_packed_real_tokens_per_s"] = round(real / t_upd_pack)
    out["update_padded_s"] = round(t_upd_pad, 4)
    out["update_padded_real_tokens_per_s"] = round(real / t_upd_pad)
    if cuda:
        out["peak_alloc_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    if cuda and args.packed == "flex":
        out |= flex_grad_check(dev)
    return out


def generate_caches(args: Any, model: Any, ids: torch.Tensor, mask: torch.Tensor, pw: int, sync: Any,
                    cuda: bool, out: dict[str, Any]) -> None:
    """HF generate tokens/s with the dynamic and the static KV cache, ``--gen-rows`` prompts × ``--new-tokens``.

    The untimed first call has the timed call's exact shape: the static cache is sized prompt + new tokens,
    and transformers compiles the decode step for that size, so a shorter warm-up (4 tokens, as before
    2026-11-27) left a recompile inside the timed call. The first call's time is reported too (the compile
    a job pays once, as start-up). ``out`` is printed after each cache (the last line is the newest): a cap
    that ends the static cache's compile keeps the dynamic figures and says which cache was running."""
    model.eval()
    rows = min(args.gen_rows or args.micro, ids.shape[0])
    prompts, pmask = ids[:rows, :pw], mask[:rows, :pw]
    new = args.new_tokens if cuda else 4
    out.update(generate_rows=rows, generate_new_tokens=new)
    for cache in ("dynamic", "static"):
        kw: dict[str, Any] = {"cache_implementation": "static"} if cache == "static" else {}
        out["generate_running"] = cache
        print(json.dumps(out), flush=True)

        def call(kw: dict[str, Any] = kw) -> Any:
            return model.generate(prompts, attention_mask=pmask, max_new_tokens=new, min_new_tokens=new,
                                  do_sample=True, pad_token_id=0, **kw)
        try:
            with torch.no_grad():
                _, t_first = timed(call, sync)  # warm-up at the timed shape (and compile, for the static cache)
                gen, t_gen = timed(call, sync)
            out[f"generate_{cache}_tokens_per_s"] = round((gen.shape[1] - pw) * rows / t_gen, 1)
            out[f"generate_{cache}_s"] = round(t_gen, 3)
            out[f"generate_{cache}_first_s"] = round(t_first, 3)
        except Exception as exc:  # report, do not hide: a cache this transformers cannot use is a finding
            out[f"generate_{cache}_error"] = f"{type(exc).__name__}: {exc}"[:300]
    out.pop("generate_running")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
