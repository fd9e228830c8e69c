"""Packed log-prob passes: each sequence's log-probs equal the padded pass's, and nothing crosses a boundary."""

from __future__ import annotations

import pytest
import torch

from gputrain.train.grpo.loss import completion_logprobs
from gputrain.train.grpo.packing import pack_lengths, packed_completion_logprobs, packed_tokens

transformers = pytest.importorskip("transformers")


def tiny_policy() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2)
    cfg._attn_implementation = "sdpa"
    return transformers.Qwen2ForCausalLM(cfg).eval()


def rollout() -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """Left-padded prompts (width 6), right-padded completions (width 9), lengths all different."""
    prompt_w, comp_w = 6, 9
    ids = torch.randint(1, 64, (5, prompt_w + comp_w), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    for r, (p, c) in enumerate([(6, 9), (3, 2), (4, 7), (1, 1), (6, 5)]):
        mask[r, : prompt_w - p] = 0
        mask[r, prompt_w + c :] = 0
    return ids * mask, mask, prompt_w, comp_w


def test_packed_log_probs_equal_the_padded_pass() -> None:
    model = tiny_policy()
    ids, mask, prompt_w, comp_w = rollout()
    with torch.no_grad():
        padded = completion_logprobs(model, ids, mask, comp_w) * mask[:, prompt_w:]
        packed, _ = packed_completion_logprobs(model, ids, mask, comp_w, max_tokens=20)
    assert len(pack_lengths(mask.sum(1).tolist(), 20)) < ids.shape[0]  # several sequences do share a row
    assert torch.allclose(packed, padded, atol=1e-5, rtol=0)
    processed, padded_n = packed_tokens(mask, 20)
    assert processed == int(mask.sum()) < padded_n  # no compute on padding


def test_a_sequence_never_attends_across_its_boundary() -> None:
    """Change the tokens of the sequence packed before another: the other's log-probs must not move."""
    model = tiny_policy()
    ids, mask, _, comp_w = rollout()
    lengths = mask.sum(1).tolist()
    group = next(g for g in pack_lengths(lengths, 20) if len(g) > 1)
    first, later = group[0], group[1:]
    with torch.no_grad():
        before, _ = packed_completion_logprobs(model, ids, mask, comp_w, max_tokens=20)
        changed = ids.clone()
        changed[first] = torch.where(mask[first].bool(), (changed[first] + 7) % 63 + 1, changed[first])
        after, _ = packed_completion_logprobs(model, changed, mask, comp_w, max_tokens=20)
    assert torch.equal(before[later], after[later])
    assert not torch.equal(before[first], after[first])


def test_gradients_match_the_padded_update() -> None:
    model = tiny_policy()
    ids, mask, prompt_w, comp_w = rollout()
    comp = mask[:, prompt_w:].float()
    grads = []
    for packed in (False, True):
        model.zero_grad()
        lp = packed_completion_logprobs(model, ids, mask, comp_w, max_tokens=20)[0] if packed else \
            completion_logprobs(model, ids, mask, comp_w)
        (lp * comp).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    for a, b in zip(*grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)
