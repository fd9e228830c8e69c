"""FSDP2 really shards the GRPO policy on 2 gloo ranks (CPU), and the core works on the sharded model.

Run by pytest, this file starts itself under ``torchrun --nproc_per_node 2``; each rank writes what it
saw to a JSON file that the test then checks:

- every parameter is a DTensor and the rank's local shard is smaller than the whole model;
- loss and gradients of a GRPO step on the sharded model equal those of an unsharded copy;
- ranks generating different numbers of tokens (one stops early) do not deadlock;
- full-state checkpoint save/load round-trips the weights exactly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gputrain.recipe.schema import ModelSpec

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_fsdp_shards_and_matches_unsharded(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    if shutil.which("torchrun") is None and os.environ.get("CI") != "true":
        pytest.skip("torchrun not available")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "GRPO_FSDP_OUT": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", __file__],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for rep in reports:
        assert rep["sharded"] is True
        assert rep["dtensor_params"] == rep["total_params"] > 0
        assert rep["local_numel"] < rep["global_numel"]
        assert rep["loss_diff"] < 1e-5
        assert rep["max_grad_diff"] < 1e-5
        assert rep["accum_grad_diff"] < 1e-5
        assert 1 <= rep["generated"] <= [3, 7][rep["rank"]]
        assert rep.get("alone") == (1 if rep["rank"] == 0 else None)
        assert rep["roundtrip_max_diff"] == 0.0
        assert rep["optimizer_steps"] == rep["saved_steps"] == [1.0]
        assert rep["exp_avg_diff"] == 0.0
        assert rep["step_param_diff"] < 1e-5
    assert sum(r["local_numel"] for r in reports) >= reports[0]["global_numel"]


def _worker() -> None:
    import copy

    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from gputrain.train.grpo.loss import completion_logprobs, grpo_loss
    from gputrain.train.grpo.policy import build_model, train_tiny_tokenizer
    from gputrain.train.grpo.rollout import generate
    from gputrain.train.grpo.sharding import apply_fsdp, sharding_report
    from gputrain.train.grpo.state import load_full_state, save_full_state

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tok = train_tiny_tokenizer(["def f(x):\n    return x*2\n", "assert f(1) == 2\n"] * 4, vocab_size=40)
    model = build_model(ModelSpec(name="tiny-qwen2", hidden_size=32, num_layers=2, num_heads=2), tok, seed=1)
    plain = copy.deepcopy(model)
    apply_fsdp(model, "cpu")
    report = sharding_report(model, "fsdp")
    out: dict[str, object] = {"rank": rank, "sharded": report.sharded, **report.__dict__}

    g = torch.Generator().manual_seed(0)  # same batch on both ranks: FSDP's averaged grads equal plain ones
    ids = torch.randint(2, len(tok), (4, 10), generator=g)
    attn = torch.ones_like(ids)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    mask = torch.ones(4, 4)
    losses = []
    for m in (model, plain):
        lp = completion_logprobs(m, ids, attn, 4)
        loss = grpo_loss(lp, adv, mask, ref_logps=lp.detach() - 0.1, beta=0.04, loss_type="grpo").loss
        loss.backward()
        losses.append(loss.item())
    out["loss_diff"] = abs(losses[0] - losses[1])
    plain_params = dict(plain.named_parameters())
    diffs = []
    for name, p in model.named_parameters():
        assert isinstance(p, DTensor) and isinstance(p.grad, DTensor)
        diffs.append(float((p.grad.full_tensor() - plain_params[name].grad).abs().max()))
    out["max_grad_diff"] = max(diffs)

    # Accumulating two micro-batches with the gradient sync off for the first gives the same gradients.
    from gputrain.train.grpo.phases import grad_sync as _grad_sync

    full_grads = {n: p.grad.full_tensor().clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    for i, sl in enumerate((slice(0, 2), slice(2, 4))):
        with _grad_sync(model, sync=i == 1):
            lp = completion_logprobs(model, ids[sl], attn[sl], 4)
            loss = grpo_loss(
                lp, adv[sl], mask[sl], ref_logps=lp.detach() - 0.1, beta=0.04, loss_type="grpo", accum_steps=2
            ).loss
            loss.backward()
    out["accum_grad_diff"] = max(
        float((p.grad.full_tensor() - full_grads[n]).abs().max()) for n, p in model.named_parameters()
    )

    for m in (model, plain):
        torch.optim.SGD(m.parameters(), lr=0.1).step()
    out["step_param_diff"] = max(
        float((p.full_tensor() - plain_params[n]).detach().abs().max()) for n, p in model.named_parameters()
    )

    # Rank 1 asks for more tokens and more prompts than rank 0: no collective inside generate may hang.
    n_new = [3, 7][rank]
    roll = generate(
        model,
        tok,
        ["def f(x):"] * (1 + rank),
        max_prompt_length=16,
        max_new_tokens=n_new,
        temperature=1.0,
        device=torch.device("cpu"),
    )
    out["generated"] = int(roll.completion_ids.size(1))

    # Rank-0-only evaluation: every rank gathers the weights, rank 0 generates alone, the others wait.
    from gputrain.train.grpo.sharding import unsharded_for_generation

    with unsharded_for_generation(model):
        if rank == 0:
            alone = generate(
                model,
                tok,
                ["def f(x):"],
                max_prompt_length=16,
                max_new_tokens=6,
                temperature=0.0,
                device=torch.device("cpu"),
                gather=False,
            )
            out["alone"] = len(alone.texts)
        dist.barrier()

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()  # real optimizer state to round-trip
    full = save_full_state(model, opt)
    saved_steps = [float(s["step"]) for s in opt.state.values()]
    before = {n: p.full_tensor().detach().clone() for n, p in model.named_parameters()}
    avg_before = [opt.state[p]["exp_avg"].full_tensor().clone() for p in model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    fresh = torch.optim.AdamW(model.parameters(), lr=1e-3)  # resuming starts from a fresh optimizer
    load_full_state(model, fresh, full)
    out["optimizer_steps"] = sorted({float(s["step"]) for s in fresh.state.values()})
    out["saved_steps"] = sorted(set(saved_steps))
    out["exp_avg_diff"] = max(
        float((fresh.state[p]["exp_avg"].full_tensor() - a).abs().max())
        for p, a in zip(model.parameters(), avg_before, strict=True)
    )
    after = {n: p.full_tensor().detach() for n, p in model.named_parameters()}
    out["roundtrip_max_diff"] = max(float((after[k] - before[k]).abs().max()) for k in after)

    Path(os.environ["GRPO_FSDP_OUT"], f"rank{rank}.json").write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    _worker()
