"""Issue #27's speed levers change no value and no gradient (fp32, CPU): the compiled-loss function in its eager
form, and the shared adaLN modulation (one vector per sequence, broadcast, when the network does not see t).

The padded head columns are rigged to win (bias +1e4) so that a leak into the loss would show; dropout is on
(the recipe's 0.1) with the same seed on both sides, so the levers must keep it where it was.
"""

from __future__ import annotations

from typing import get_args

import pytest
import torch

from gputrain.recipe.algorithms.diffusion import DiffusionAlgorithm
from gputrain.train.diffusion.compiled_ce import head_nll
from gputrain.train.diffusion.model import COMPILE_MODES, DiT, DiTConfig
from gputrain.train.diffusion.objective import Layout, draw_times, nelbo_per_token
from gputrain.train.diffusion.sampler import sample
from gputrain.train.diffusion.schedule import LogLinearSchedule

VOCAB, MASK = 40, 39
LAYOUT = Layout.bd3(16, 4)


def _model(**kw: object) -> DiT:
    torch.manual_seed(0)
    model = DiT(DiTConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4, cond_dim=16, dropout=0.1,
                          **kw))  # type: ignore[arg-type]
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    with torch.no_grad():
        model.head.bias[VOCAB:] = 1e4  # the padding would win every softmax if it leaked
    return model


def _loss(model: DiT, **kw: object) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    inputs = LAYOUT.training_inputs(torch.device("cpu"))
    g = torch.Generator().manual_seed(3)
    x0 = torch.randint(0, MASK, (6, LAYOUT.seq_len), generator=g)
    t = draw_times(6, LAYOUT, 0.3, 0.8, True, torch.device("cpu"), generator=g)
    torch.manual_seed(5)  # dropout's draws
    terms = nelbo_per_token(model, x0, t, LAYOUT, LogLinearSchedule(), MASK, inputs, generator=g, **kw)  # type: ignore[arg-type]
    terms.sum().backward()
    return terms.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.allclose(a, b, rtol=1e-5, atol=1e-5 * float(b.abs().max().clamp_min(1e-30))))


def _assert_same(want: tuple[torch.Tensor, dict[str, torch.Tensor]],
                 got: tuple[torch.Tensor, dict[str, torch.Tensor]]) -> None:
    assert float(want[0].abs().sum()) > 0 and _close(got[0], want[0])
    assert want[1].keys() == got[1].keys()
    for name, g in want[1].items():
        assert float(g.abs().sum()) > 0 or name.startswith("time."), name
        assert _close(got[1][name], g), name


@pytest.mark.parametrize("buckets", [None, 4])
def test_compiled_loss_function_gives_the_default_loss_and_gradients(buckets: int | None) -> None:
    model = _model()
    _assert_same(_loss(model, row_buckets=buckets), _loss(model, row_buckets=buckets, compiled_ce=True))


def test_compiled_loss_function_bans_the_mask_and_the_padding() -> None:
    h, w = torch.randn(5, 8), torch.randn(16, 8)
    bias = torch.zeros(16)
    bias[10:] = 1e4
    target = torch.tensor([0, 1, 2, 3, 9])
    nll = head_nll(h, w, bias, target, banned=3, valid=10)
    logits = h @ w.t()
    logits[:, 3] = float("-inf")
    want = torch.nn.functional.cross_entropy(logits[:, :10], target, reduction="none")
    assert torch.isinf(nll[3]) and torch.allclose(nll[[0, 1, 2, 4]], want[[0, 1, 2, 4]])


@pytest.mark.parametrize("checkpointing", [False, True])
def test_shared_modulation_gives_the_per_token_loss_and_gradients(checkpointing: bool) -> None:
    base = _model(gradient_checkpointing=checkpointing)
    shared = _model(gradient_checkpointing=checkpointing, shared_modulation=True)
    shared.load_state_dict(base.state_dict())
    _assert_same(_loss(base), _loss(shared))
    _assert_same(_loss(base, compiled_ce=True), _loss(shared, compiled_ce=True))


def test_shared_modulation_is_off_when_the_network_sees_t() -> None:
    cfg = DiTConfig(vocab_size=VOCAB, shared_modulation=True, time_conditioning=True)
    assert not cfg.shares_modulation
    assert DiTConfig(vocab_size=VOCAB, shared_modulation=True).shares_modulation


def test_shared_modulation_samples_the_same_tokens() -> None:
    base, shared = _model(), _model(shared_modulation=True)
    shared.load_state_dict(base.state_dict())
    layout = Layout.bd3(8, 4)
    outs = [sample(m.eval(), layout, LogLinearSchedule(), MASK, 3, None, torch.device("cpu"),
                   generator=torch.Generator().manual_seed(1)) for m in (base, shared)]
    assert torch.equal(outs[0], outs[1])


def test_every_compile_mode_of_the_recipe_has_inductor_settings_that_exist() -> None:
    """A misspelt Inductor option would fail only on a GPU, at the first compiled step."""
    import torch._inductor.config as inductor

    assert set(get_args(DiffusionAlgorithm.model_fields["compile_mode"].annotation)) == set(COMPILE_MODES)
    for kw in COMPILE_MODES.values():
        assert set(kw) <= {"mode", "options"}
        assert all(hasattr(inductor, name) for name in kw.get("options", {}))
        torch.compile(torch.nn.Identity(), dynamic=False, **kw)  # checks mode and options; compiles nothing yet
