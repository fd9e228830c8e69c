"""Issue #27: the padded vocabulary and the bucketed loss rows change no value and no gradient (fp32).

The head is built 64-aligned (V = 40 → 64 here, 50,258 → 50,304 for GPT-2) and its padded columns are
rigged to win (bias +1e4) so that any leak into the loss or the sampler would show. The masked rows reach
the head in fixed-size buckets; the padded rows must not move the loss or any gradient.
"""

from __future__ import annotations

import pytest
import torch

from gputrain.contract.vocab import padded_vocab
from gputrain.train.diffusion.ema import make_ema
from gputrain.train.diffusion.head_rows import bucketed_rows, row_quantum
from gputrain.train.diffusion.model import DiT, DiTConfig, pad_vocab_moments
from gputrain.train.diffusion.objective import Layout, draw_times, nelbo_per_token
from gputrain.train.diffusion.sampler import sample
from gputrain.train.diffusion.schedule import LogLinearSchedule

VOCAB, MASK = 40, 39
LAYOUT = Layout.bd3(16, 4)


def _models() -> tuple[DiT, DiT]:
    """An unpadded model with random weights and the padded model loaded from its state dict."""
    torch.manual_seed(0)
    small = DiT(DiTConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4, cond_dim=16,
                          vocab_multiple=1))
    for p in small.parameters():
        torch.nn.init.normal_(p, std=0.3)
    padded = DiT(DiTConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4, cond_dim=16))
    padded.load_state_dict(small.state_dict())  # an unpadded checkpoint: rows appended by the load hook
    with torch.no_grad():
        padded.head.bias[VOCAB:] = 1e4  # the padding would win every softmax if it leaked
        padded.embed.weight[VOCAB:].normal_()
    return small, padded


def _loss(model: DiT, **kw: object) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    inputs = LAYOUT.training_inputs(torch.device("cpu"))
    g = torch.Generator().manual_seed(3)
    x0 = torch.randint(0, MASK, (6, LAYOUT.seq_len), generator=g)
    t = draw_times(6, LAYOUT, 0.3, 0.8, True, torch.device("cpu"), generator=g)
    terms = nelbo_per_token(model, x0, t, LAYOUT, LogLinearSchedule(), MASK, inputs, generator=g, **kw)  # type: ignore[arg-type]
    terms.sum().backward()
    return terms.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.allclose(a, b, rtol=1e-6, atol=1e-6 * float(b.abs().max().clamp_min(1e-30))))


def test_padding_is_64_aligned() -> None:
    assert padded_vocab(50258) == 50304 and padded_vocab(50304) == 50304 and padded_vocab(40) == 64
    assert padded_vocab(50258, 1) == 50258
    with pytest.raises(ValueError):
        padded_vocab(10, 0)


@pytest.mark.parametrize("chunked", [False, True])
def test_padded_head_gives_the_unpadded_loss_and_gradients(chunked: bool) -> None:
    small, padded = _models()
    assert padded.head.weight.shape[0] == 64 and padded.embed.weight.shape[0] == 64
    want, want_g = _loss(small, chunked_ce=chunked, row_buckets=None)
    got, got_g = _loss(padded, chunked_ce=chunked, row_buckets=None)
    assert float(want.abs().sum()) > 0 and _same(got, want)
    assert want_g.keys() == got_g.keys()
    for name, g in want_g.items():
        assert _same(got_g[name][: g.shape[0]], g), name
        assert not got_g[name][g.shape[0] :].any(), f"{name}: a padded row got a gradient"


@pytest.mark.parametrize("chunked", [False, True])
def test_bucketed_rows_give_the_exact_gather_loss_and_gradients(chunked: bool) -> None:
    _, model = _models()
    want, want_g = _loss(model, chunked_ce=chunked, row_buckets=None)
    got, got_g = _loss(model, chunked_ce=chunked, row_buckets=4)
    assert _same(got, want)
    for name, g in want_g.items():
        assert _same(got_g[name], g), name


def test_sampling_never_draws_a_padded_id_and_matches_the_unpadded_model() -> None:
    small, padded = _models()
    layout = Layout.bd3(8, 4)
    outs = [sample(m, layout, LogLinearSchedule(), MASK, 4, None, torch.device("cpu"),
                   generator=torch.Generator().manual_seed(1), first_hitting=fh)
            for fh in (True, False) for m in (small, padded)]
    for out in outs:
        assert int(out.max()) < VOCAB
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[2], outs[3])


def test_an_unpadded_optimizer_state_resumes_on_the_padded_model() -> None:
    small, padded = _models()
    _loss(small, row_buckets=None)
    opt = torch.optim.AdamW(small.parameters(), lr=1e-3)
    opt.step()
    saved = opt.state_dict()
    new = torch.optim.AdamW(padded.parameters(), lr=1e-3)
    new.register_load_state_dict_post_hook(pad_vocab_moments)
    new.load_state_dict(saved)
    moment = new.state[padded.head.weight]["exp_avg"]
    assert moment.shape == padded.head.weight.shape
    assert torch.equal(moment[:VOCAB], opt.state[small.head.weight]["exp_avg"]) and not moment[VOCAB:].any()
    _loss(padded, row_buckets=None)
    new.step()  # shapes agree: an unpadded moment would raise here
    old_ema, new_ema = make_ema(small, 0.9), make_ema(padded, 0.9)
    assert old_ema is not None and new_ema is not None
    new_ema.load_state_dict(old_ema.state_dict())  # the EMA copy of an old checkpoint pads the same way
    assert torch.equal(new_ema.module.embed.weight[:VOCAB], small.embed.weight)


def test_bucketed_rows_keep_order_and_use_few_shapes() -> None:
    g = torch.Generator().manual_seed(0)
    sizes = set()
    for _ in range(50):
        sel = torch.rand(32, 512, generator=g) < 0.3 + 0.5 * torch.rand(1, generator=g)
        idx, count = bucketed_rows(sel)
        assert count == int(sel.sum()) and torch.equal(idx[:count], sel.reshape(-1).nonzero().squeeze(-1))
        assert len(idx) % row_quantum(sel.numel()) == 0 and len(idx) - count < row_quantum(sel.numel())
        sizes.add(len(idx))
    assert len(sizes) <= 17  # t's range [0.3, 0.8] spans at most half of the 32 buckets (+1 at the edge)
    assert row_quantum(32 * 1024) == 1024 and row_quantum(100) == 64


def test_planner_counts_the_dit_the_trainer_builds_padded_head_included() -> None:
    from gputrain.planner import make_plan
    from gputrain.planner.memory_diffusion import dit_params
    from tests.conftest import RECIPES

    recipe = make_plan(RECIPES / "bd3lm_gsm8k.yaml", gpu="H100", gpus_per_node=1, check_memory=False).recipe
    m, algo = recipe.model, recipe.algorithm
    with torch.device("meta"):
        net = DiT(DiTConfig(vocab_size=m.vocab_size or 0, hidden_size=m.hidden_size or 0,
                            num_layers=m.num_layers or 0, num_heads=m.num_heads or 1,
                            cond_dim=algo.cond_dim))  # type: ignore[union-attr]
    assert net.head.weight.shape[0] == 50304
    assert dit_params(recipe)[0] == sum(p.numel() for p in net.parameters())
