"""One rank of ``test_full_weights_under_ddp_and_fsdp2_on_two_gloo_ranks`` (started by torchrun, 2 gloo ranks).

Builds the same tiny Qwen2 on both ranks, wraps copies with DDP, with FSDP2 ``fully_shard`` and with
activation-checkpoint wrappers under ``fully_shard``, and writes what ``iter_full_weights`` gave compared with
the unwrapped model's state dict to ``$GRPO_VLLM_OUT/rank<r>.json``.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from gputrain.recipe.schema import ModelSpec


def _compare(weights: list[tuple[str, torch.Tensor]], reference: torch.nn.Module) -> dict[str, Any]:
    state = reference.state_dict()
    got = dict(weights)
    common = set(got) & set(state)
    return {
        "names": [n for n, _ in weights],
        "max_diff": max(float((got[n] - state[n]).abs().max()) for n in common) if common else None,
        "missing": sorted(set(state) - set(got)),
        "extra": sorted(set(got) - set(state)),
        "all_full_shape": all(tuple(got[n].shape) == tuple(state[n].shape) for n in common),
    }


def main() -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    from gputrain.train.grpo.policy import build_model, train_tiny_tokenizer
    from gputrain.train.grpo.sharding import apply_ddp, apply_fsdp, sharding_report
    from gputrain.train.grpo.vllm_engine import iter_full_weights

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tok = train_tiny_tokenizer(["def f(x):\n    return x*2\n", "assert f(1) == 2\n"] * 4, vocab_size=40)
    reference = build_model(ModelSpec(name="tiny-qwen2", hidden_size=32, num_layers=2, num_heads=2), tok, seed=1)
    out: dict[str, Any] = {"rank": rank}

    ddp = apply_ddp(copy.deepcopy(reference), torch.device("cpu"))
    out["ddp"] = _compare(list(iter_full_weights(ddp)), reference)

    fsdp = apply_fsdp(copy.deepcopy(reference), "cpu")
    out["fsdp_sharded"] = sharding_report(fsdp, "fsdp").sharded
    out["fsdp"] = _compare(list(iter_full_weights(fsdp)), reference)

    wrapped = copy.deepcopy(reference)
    for i, layer in enumerate(wrapped.model.layers):
        wrapped.model.layers[i] = checkpoint_wrapper(layer)
    apply_fsdp(wrapped, "cpu")
    out["fsdp_checkpoint_wrapped"] = _compare(list(iter_full_weights(wrapped)), reference)

    Path(os.environ["GRPO_VLLM_OUT"], f"rank{rank}.json").write_text(json.dumps(out))
    dist.barrier()  # without it the gloo teardown sometimes aborts (SIGABRT)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
