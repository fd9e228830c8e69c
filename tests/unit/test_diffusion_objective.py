import math

import pytest
import torch

from gputrain.train.diffusion.model import DiT, DiTConfig
from gputrain.train.diffusion.objective import Layout, draw_times, nelbo_per_token, subs_log_probs
from gputrain.train.diffusion.schedule import LogLinearSchedule, sample_block_times

CPU = torch.device("cpu")


def tiny(vocab: int = 100) -> DiT:
    torch.manual_seed(0)
    return DiT(DiTConfig(vocab_size=vocab, hidden_size=32, num_layers=2, num_heads=4, cond_dim=16))


def test_nelbo_at_initialisation_is_ln_vocab() -> None:
    vocab, layout = 100, Layout.bd3(16, 4)
    model, sched = tiny(vocab), LogLinearSchedule()
    inputs = layout.training_inputs(CPU)
    g = torch.Generator().manual_seed(1)
    values = []
    with torch.no_grad():
        for _ in range(40):
            x0 = torch.randint(0, vocab - 1, (16, 16), generator=g)
            t = draw_times(16, layout, 0.0, 1.0, True, CPU, generator=g)
            values.append(nelbo_per_token(model, x0, t, layout, sched, vocab - 1, inputs, generator=g).mean())
    est = float(torch.stack(values).mean())
    # SUBS removes [MASK], so an uninformed model scores ln(V - 1) per token; 1/t weighting makes it t-free.
    assert est == pytest.approx(math.log(vocab - 1), rel=0.05)


def test_unmasked_tokens_cost_nothing_and_weight_is_one_over_t() -> None:
    sched = LogLinearSchedule(eps=0.0)
    assert torch.allclose(sched.loss_weight(torch.tensor([0.25, 0.5, 1.0])), torch.tensor([4.0, 2.0, 1.0]))
    layout, model = Layout.bd3(8, 4), tiny()
    x0 = torch.randint(0, 99, (4, 8))
    t = torch.full((4, 2), 1e-9)  # (almost) nothing is masked
    out = nelbo_per_token(model, x0, t, layout, sched, 99, layout.training_inputs(CPU))
    assert torch.count_nonzero(out) == 0


def test_subs_never_predicts_mask() -> None:
    logp = subs_log_probs(torch.randn(3, 5, 10), mask_id=9)
    assert torch.isinf(logp[..., 9]).all()
    assert torch.allclose(logp.exp().sum(-1), torch.ones(3, 5))


def test_block_times_are_stratified_and_clipped() -> None:
    g = torch.Generator().manual_seed(0)
    t = sample_block_times(4, 8, low=0.3, high=0.8, generator=g)
    assert t.shape == (4, 8)
    assert float(t.min()) >= 0.3 and float(t.max()) <= 0.8
    strata = torch.floor((t.flatten() - 0.3) / 0.5 * 32).long()
    assert sorted(strata.tolist()) == list(range(32))  # antithetic: one draw per stratum


def test_bad_clip_range_is_refused() -> None:
    with pytest.raises(ValueError, match="clip range"):
        sample_block_times(2, 2, low=0.8, high=0.3)
