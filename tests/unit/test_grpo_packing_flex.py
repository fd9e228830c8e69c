"""FlexAttention packing (#27): each sequence's log-probs and entropies equal the padded pass's (fp32, 1e-5),
nothing attends across a sequence boundary, and the policy's own attention is restored. torch has no
FlexAttention backward on the CPU ("does not support backward on CPU", 2.13): the gradients are compared on
a GPU by ``benchmarks/rl_logprob_bench.py --packed flex`` (gpu_suite step ``rl_logprob_flex``)."""

from __future__ import annotations

import pytest
import torch

from gputrain.train.grpo.loss import completion_logprobs_and_entropy
from gputrain.train.grpo.packing import pack_lengths
from gputrain.train.grpo.packing_flex import FLEX_BLOCK, flex_packed_completion_logprobs
from tests.unit.test_grpo_packing import rollout, tiny_policy

pytestmark = pytest.mark.slow  # transformers compiles FlexAttention, on the CPU too: ~15-40 s, once per module


@torch.no_grad()
def test_flex_packed_log_probs_and_entropy_equal_the_padded_pass() -> None:
    model = tiny_policy()
    ids, mask, prompt_w, comp_w = rollout()
    comp = mask[:, prompt_w:].float()
    lp_a, ent_a = completion_logprobs_and_entropy(model, ids, mask, comp_w)
    lp_b, ent_b = flex_packed_completion_logprobs(model, ids, mask, comp_w, max_tokens=20, entropy=True)
    assert ent_a is not None and ent_b is not None
    assert len(pack_lengths(mask.sum(1).tolist(), 20)) < ids.shape[0]  # sequences do share a bin
    assert float(comp.sum()) > 0
    assert torch.allclose(lp_b, lp_a * comp, atol=1e-5, rtol=0)
    assert torch.allclose(ent_b, ent_a * comp, atol=1e-5, rtol=0)
    assert model.config._attn_implementation == "sdpa"  # selected for the packed call only


@torch.no_grad()
def test_flex_packed_sequence_never_attends_across_its_boundary() -> None:
    """Change the tokens of the sequence packed first in a bin: the others' log-probs must not move."""
    model = tiny_policy()
    ids, mask, _, comp_w = rollout()
    group = next(g for g in pack_lengths(mask.sum(1).tolist(), 20) if len(g) > 1)
    first, later = group[0], group[1:]
    before, _ = flex_packed_completion_logprobs(model, ids, mask, comp_w, max_tokens=20)
    changed = ids.clone()
    changed[first] = torch.where(mask[first].bool(), (changed[first] + 7) % 63 + 1, changed[first])
    after, _ = flex_packed_completion_logprobs(model, changed, mask, comp_w, max_tokens=20)
    assert torch.equal(before[later], after[later])
    assert not torch.equal(before[first], after[first])
    assert FLEX_BLOCK % 128 == 0


@torch.no_grad()
def test_switching_between_eval_and_train_keeps_one_compiled_flex_kernel() -> None:
    """The trainer's passes alternate eval (reference, old policy) and train (update): transformers would
    compile FlexAttention again at each switch (#27); the compiled kernel must stay the same object."""
    from transformers.integrations.flex_attention import WrappedFlexAttention

    model = tiny_policy()
    ids, mask, _, comp_w = rollout()
    flex_packed_completion_logprobs(model, ids, mask, comp_w, max_tokens=20)
    kernel = WrappedFlexAttention._instance._compiled_flex_attention
    assert kernel is not None
    model.train()
    flex_packed_completion_logprobs(model, ids, mask, comp_w, max_tokens=20)
    model.eval()
    flex_packed_completion_logprobs(model, ids, mask, comp_w, max_tokens=20)
    assert WrappedFlexAttention._instance._compiled_flex_attention is kernel
