import pytest
import torch

from gputrain.train.diffusion.data import ByteTokenizer, generate_problems
from gputrain.train.diffusion.hierarchy import encode_hdp, hdp_layout
from gputrain.train.diffusion.model import DiT, DiTConfig
from gputrain.train.diffusion.objective import nelbo_per_token, segment_means
from gputrain.train.diffusion.schedule import LogLinearSchedule

CPU = torch.device("cpu")


class Spy(torch.nn.Module):
    """Wraps the model and keeps what it was fed."""

    def __init__(self, inner: DiT) -> None:
        super().__init__()
        self.inner, self.seen = inner, []

    def forward(self, tokens: torch.Tensor, *args: object, **kwargs: object) -> object:
        self.seen.append(tokens.clone())
        return self.inner(tokens, *args, **kwargs)


def test_question_is_never_noised_and_never_scored() -> None:
    q, p, e, vocab, mask_id = 6, 4, 8, 40, 39
    layout = hdp_layout(q, p, e, exec_block=4)
    spy = Spy(DiT(DiTConfig(vocab_size=vocab, hidden_size=32, num_layers=1, num_heads=4, cond_dim=16)))
    x0 = torch.randint(0, mask_id, (5, q + p + e))
    t = torch.ones(5, layout.num_noisy_blocks)  # t = 1: everything diffused is masked
    with torch.no_grad():
        per_tok = nelbo_per_token(spy, x0, t, layout, LogLinearSchedule(eps=0.0), mask_id,
                                  layout.training_inputs(CPU))
    fed = spy.seen[0]
    noisy, clean = fed[:, : p + e], fed[:, p + e :]
    assert (noisy == mask_id).all()  # plan and execution fully masked at t = 1...
    assert torch.equal(clean, x0)  # ...while the clean stream, question included, is untouched
    assert not (clean[:, :q] == mask_id).any()
    assert per_tok.shape == (5, p + e)  # no loss slot exists for the question
    means = segment_means(per_tok, layout)
    assert set(means) == {"plan", "exec"}
    assert float(means["plan"]) > 0 and float(means["exec"]) > 0


def test_plan_and_execution_have_their_own_noise_levels() -> None:
    layout = hdp_layout(4, 4, 8)
    assert layout.num_noisy_blocks == 2  # one t for the whole plan, one for the execution
    assert layout.noisy_slots.tolist() == [0] * 4 + [1] * 8
    assert hdp_layout(4, 4, 8, plan_block=2, exec_block=4).num_noisy_blocks == 4


def test_sub_block_must_divide_segment() -> None:
    with pytest.raises(ValueError, match="exec_block"):
        hdp_layout(4, 4, 8, exec_block=3)


def test_encoding_puts_question_plan_execution_in_fixed_slots() -> None:
    tok = ByteTokenizer()
    row = generate_problems(1, seed=5)[0]
    ids = encode_hdp(tok, row, 96, 48, 128)
    assert len(ids) == 96 + 48 + 128
    plan = tok.decode([i for i in ids[96:144] if i != tok.eos_id])
    assert "=" in plan and "<<" not in plan  # the calculator annotations, unwrapped
    assert tok.decode(ids[:96]).startswith("Question: ")
