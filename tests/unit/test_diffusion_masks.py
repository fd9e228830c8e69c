import pytest
import torch

from gputrain.train.diffusion.hierarchy import hdp_layout
from gputrain.train.diffusion.masks import bd3_mask, block_diffusion_mask, reference_bd3_mask


@pytest.mark.parametrize(("n", "block"), [(4, 1), (8, 2), (12, 4), (16, 4), (16, 8), (16, 16), (24, 8)])
def test_bd3_mask_matches_brute_force(n: int, block: int) -> None:
    assert torch.equal(bd3_mask(n, block), reference_bd3_mask(n, block))


def test_bd3_mask_has_the_three_sub_masks() -> None:
    m = bd3_mask(8, 4)
    assert m[0, 3] and not m[0, 4]  # x_t block-diagonal
    assert m[4, 8] and not m[4, 12] and not m[0, 8]  # x_t block 1 sees x_0 block 0 only
    assert m[12, 8] and m[12, 15] and not m[8, 12]  # x_0 block-causal
    assert not m[8:, :8].any()  # clean never sees noisy


def test_block_size_must_divide_length() -> None:
    with pytest.raises(ValueError, match="multiple"):
        bd3_mask(10, 4)


def test_hdp_mask_question_is_clean_conditioning() -> None:
    lay = hdp_layout(q=4, p=4, e=8, exec_block=4)
    mask = block_diffusion_mask(lay.block_ids[lay.noisy_pos], lay.block_ids)
    m = len(lay.noisy_pos)
    assert m == 12  # Q is not in the noisy stream
    qcols = slice(m, m + 4)
    assert mask[:, qcols].all()  # everybody sees the whole question
    assert not mask[m : m + 4, m + 4 :].any()  # question sees nothing after it
    assert not mask[:4, m + 4 : m + 8].any()  # noisy plan does not see the clean plan
    assert mask[4:m, m + 4 : m + 8].all()  # noisy execution sees the clean plan
    assert not mask[:4, 4:m].any()  # noisy plan does not see noisy execution


@pytest.mark.filterwarnings("ignore")
def test_flex_block_mask_agrees_with_the_dense_mask() -> None:
    """The GPU path's mask_mod, run through eager FlexAttention on the CPU, gives SDPA's output."""
    from torch.nn.attention.flex_attention import flex_attention

    from gputrain.train.diffusion.masks import flex_block_mask

    lay = hdp_layout(q=8, p=8, e=16, exec_block=4)
    noisy = lay.block_ids[lay.noisy_pos]
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, len(noisy) + lay.seq_len, 16) for _ in range(3))
    flex = flex_attention(q, k, v, block_mask=flex_block_mask(noisy, lay.block_ids, torch.device("cpu")))
    dense = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=block_diffusion_mask(noisy, lay.block_ids)
    )
    assert torch.allclose(flex, dense, atol=1e-5)
