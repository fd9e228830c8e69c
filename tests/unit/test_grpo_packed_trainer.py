"""The GRPO trainer's passes with ``algorithm.sequence_packing`` (#27): the update phase (loss, KL, entropy,
gradients) and the log-prob passes give what the padded trainer gives (fp32, 1e-5), and the processed-token
tally proves the packed path ran (a trainer that silently padded would process every column). On the CPU the
trainer packs with ``packing.py`` (no FlexAttention backward there); the flex packer has its own tests."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from gputrain.train.grpo.packed_pass import TokenTally, logprob_pass, processed_tokens
from gputrain.train.grpo.phases import Policy, RolloutBatch, update_phase
from gputrain.train.grpo.rollout import Rollout
from gputrain.train.runtime.checkpoint import CheckpointManager
from gputrain.train.runtime.context import RunContext
from gputrain.train.runtime.metrics import Metrics
from gputrain.train.runtime.precision import make_precision
from gputrain.train.runtime.signals import PreemptionFlag
from tests.unit.test_grpo_packing import rollout, tiny_policy

ROOT = Path(__file__).resolve().parents[2]


def context(tmp: Path, packing: bool) -> RunContext:
    """A real RunContext on the CPU from a planned recipe: 2 completions per micro-batch, β > 0, an entropy term."""
    from gputrain.planner import make_plan

    sets = [f"algorithm.sequence_packing={'true' if packing else 'false'}", "train.batch_size=2",
            "train.precision=fp32", "algorithm.beta=0.04", "algorithm.entropy_coeff=0.01"]
    plan = make_plan(ROOT / "recipes" / "grpo_math_fsdp.yaml", gpu="H100", check_memory=False, overrides=sets)
    cpu = torch.device("cpu")
    return RunContext(rank=0, world_size=1, local_rank=0, device=cpu, plan=plan, job_dir=tmp,
                      precision=make_precision("fp32", cpu), checkpoints=CheckpointManager(tmp / "ck", 0, 1, 1),
                      metrics=Metrics(tmp, plan.recipe, enabled=False), preemption=PreemptionFlag(signals=()))


def one_update(tmp: Path, packing: bool) -> tuple[float, list[torch.Tensor], RolloutBatch]:
    ctx = context(tmp, packing)
    model, ref = tiny_policy(), tiny_policy()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(2)))
    ids, mask, prompt_w, comp_w = rollout()
    roll = Rollout(ids[:, :prompt_w], mask[:, :prompt_w], ids[:, prompt_w:], mask[:, prompt_w:],
                   torch.zeros(5, dtype=torch.bool), [""] * 5)
    tally = TokenTally(real=int(mask.sum()))
    with torch.no_grad():
        old = logprob_pass(copy.deepcopy(model), ids, mask, comp_w, 1.0, 2, packing, tally)
        ref_lp = logprob_pass(ref, ids, mask, comp_w, 1.0, 2, packing, tally)
    with torch.no_grad():  # the update sees a policy that moved since the rollout: ratios off 1, clipping live
        for p in model.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))
    start = [p.detach().clone() for p in model.parameters()]
    sgd = torch.optim.SGD(model.parameters(), lr=1.0)  # the step is the (clipped) gradient itself
    policy = Policy(model, None, ref, sgd, torch.optim.lr_scheduler.LambdaLR(sgd, lambda _: 1.0),
                    list(model.parameters()))
    adv = torch.tensor([1.0, -0.5, 0.25, -1.0, 0.5])
    batch = RolloutBatch([{}] * 5, roll, adv[None], adv, adv, roll.completion_mask.clone(), old, ref_lp, None,
                         tokens=tally)
    stats = update_phase(ctx, policy, batch, n_mini=1)
    steps = [s - p.detach() for s, p in zip(start, model.parameters(), strict=True)]
    return sum(stats.losses) + sum(stats.kls) + sum(stats.entropies), steps, batch


@pytest.mark.slow  # two real updates of a tiny Qwen2 and a plan each: 5-11 s on the shared 2 cores
def test_a_packed_update_gives_the_padded_loss_and_gradients_and_processes_fewer_tokens(tmp_path: Path) -> None:
    loss_pad, steps_pad, pad = one_update(tmp_path / "pad", packing=False)
    loss_pack, steps_pack, pack = one_update(tmp_path / "pack", packing=True)
    assert loss_pack == pytest.approx(loss_pad, abs=1e-5)
    assert max(float(s.abs().max()) for s in steps_pad) > 1e-4  # the gradient is not trivially zero
    for a, b in zip(steps_pad, steps_pack, strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=0)
    assert pack.old is not None and pad.old is not None and torch.allclose(pack.old, pad.old * pack.mask, atol=1e-5)

    mask = pad.roll.attention_mask
    assert pad.tokens.update == mask.numel() and pad.tokens.logprob == 2 * mask.numel()
    packed = sum(processed_tokens(mask[s : s + 2], True, False) for s in range(0, 5, 2))
    assert pack.tokens.update == packed < mask.numel()  # the update pass ran packed, nothing on padding
    assert pack.tokens.logprob == 2 * packed
    assert pack.tokens.real == pad.tokens.real == int(mask.sum())


def test_a_flex_packed_pass_never_counts_more_than_the_padded_grid() -> None:
    """FlexAttention pads each bin to 128 tokens: where packing saves nothing the pass runs (and counts) padded."""
    full = torch.ones(4, 320, dtype=torch.long)
    assert processed_tokens(full, True, True) == full.numel()  # 4 bins of 384 would be more
    half = full.clone()
    half[:, 160:] = 0
    assert processed_tokens(half, True, True) == 2 * 384  # two sequences per 384-token bin
    assert processed_tokens(half, True, False) == 640  # the eager packer: the real tokens
