"""The chunked head + cross-entropy equals the full-logits loss (fp32, forward and gradients within 1e-5)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gputrain.train.diffusion.chunked_ce import chunked_cross_entropy
from gputrain.train.diffusion.model import DiT, DiTConfig
from gputrain.train.diffusion.objective import Layout, draw_times, nelbo_per_token
from gputrain.train.diffusion.schedule import LogLinearSchedule


def test_chunked_equals_full_logits_with_the_banned_column() -> None:
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50)
    h = torch.randn(37, 16, requires_grad=True)
    target = torch.randint(0, 49, (37,))
    weight = torch.rand(37)
    logits = head(h).clone()
    logits[:, 49] = float("-inf")
    full = F.cross_entropy(logits, target, reduction="none")
    (full * weight).sum().backward()
    want = h.grad.clone(), head.weight.grad.clone(), head.bias.grad.clone()  # type: ignore[union-attr]
    h.grad = None
    head.zero_grad()
    got = chunked_cross_entropy(h, head, target, banned=49, chunk=8)  # 37 rows: a ragged last chunk
    (got * weight).sum().backward()
    assert torch.allclose(got, full, atol=1e-5, rtol=0)
    for a, b in zip(want, (h.grad, head.weight.grad, head.bias.grad), strict=True):
        assert b is not None and torch.allclose(a, b, atol=1e-5, rtol=0)


def test_nelbo_terms_and_gradients_agree_between_loss_paths() -> None:
    torch.manual_seed(1)
    cfg = DiTConfig(vocab_size=40, hidden_size=32, num_layers=1, num_heads=4, cond_dim=16)
    model = DiT(cfg)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.05)
    layout = Layout.bd3(16, 4)
    inputs = layout.training_inputs(torch.device("cpu"))
    x0 = torch.randint(0, 39, (3, 16))
    t = draw_times(3, layout, 0.0, 1.0, True, torch.device("cpu"), generator=torch.Generator().manual_seed(2))
    out = []
    for chunked in (False, True):
        model.zero_grad()
        terms = nelbo_per_token(model, x0, t, layout, LogLinearSchedule(), 39, inputs,
                                generator=torch.Generator().manual_seed(3), chunked_ce=chunked)
        terms.sum().backward()
        out.append((terms.detach(), [p.grad.clone() for p in model.parameters()]))  # type: ignore[union-attr]
    assert torch.allclose(out[0][0], out[1][0], atol=1e-5, rtol=0)
    for a, b in zip(out[0][1], out[1][1], strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)
