"""The block-diffusion export (safetensors + config.json) loads back into the same network, bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gputrain.errors import GputrainError
from gputrain.train.diffusion.evaluation import Scorer, heldout_nelbo
from gputrain.train.diffusion.export import export_diffusion, load_pretrained
from gputrain.train.diffusion.hierarchy import hdp_layout
from gputrain.train.diffusion.model import DiT, DiTConfig
from gputrain.train.diffusion.objective import Layout
from gputrain.train.diffusion.schedule import LogLinearSchedule

CPU = torch.device("cpu")
VOCAB, MASK, EOS = 60, 59, 58
TOK = {"name": "test", "vocab_size": VOCAB, "mask_id": MASK, "eos_id": EOS}


def trained_like(time_conditioning: bool) -> DiT:
    """A DiT whose every weight is non-zero (the zero-initialised head and adaLN would hide a lost tensor)."""
    torch.manual_seed(3)
    net = DiT(DiTConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4, cond_dim=16, dropout=0.1,
                        gradient_checkpointing=True, time_conditioning=time_conditioning))
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return net.eval()


def logits(net: DiT, layout: Layout, x0: torch.Tensor) -> torch.Tensor:
    inputs = layout.training_inputs(CPU)
    k = layout.num_noisy_blocks
    t = torch.linspace(0.1, 0.9, k).expand(x0.shape[0], k)
    t_cond = torch.cat([t, torch.zeros(x0.shape[0], 1)], dim=1)
    xt = x0[:, layout.noisy_pos].clone()
    xt[:, ::3] = MASK
    with torch.no_grad():
        out, _ = net(torch.cat([xt, x0], dim=1), inputs["positions"], t_cond, inputs["cond_idx"], mask=inputs["mask"])
    return out


@pytest.mark.parametrize(("layout", "time_conditioning"),
                         [(Layout.bd3(16, 4), False), (hdp_layout(8, 8, 8, exec_block=4), True)])
def test_exported_model_scores_a_batch_exactly_as_the_in_memory_one(tmp_path: Path, layout: Layout,
                                                                    time_conditioning: bool) -> None:
    net, schedule = trained_like(time_conditioning), LogLinearSchedule(2e-3)
    out = export_diffusion(net, layout, schedule, TOK, tmp_path, {"entrypoint": "x", "weights": "ema"})
    assert out == tmp_path / "model" and sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert not list(tmp_path.glob(".model*"))  # the temporary folder was renamed, not left behind

    pre = load_pretrained(out)
    assert not pre.model.training and pre.model.cfg.time_conditioning is time_conditioning
    assert pre.model.cfg.dropout == 0.0 and not pre.model.cfg.gradient_checkpointing  # training-only switches
    for key, value in net.state_dict().items():
        assert torch.equal(pre.model.state_dict()[key], value), key
    assert torch.equal(pre.layout.block_ids, layout.block_ids) and torch.equal(pre.layout.noisy_pos, layout.noisy_pos)
    assert pre.layout.segments.keys() == layout.segments.keys()
    assert (pre.mask_id, pre.eos_id, pre.schedule.eps) == (MASK, EOS, 2e-3)

    x0 = torch.randint(0, EOS, (4, layout.seq_len), generator=torch.Generator().manual_seed(0))
    x0[:, -3:] = EOS  # padding: not counted as real text
    assert torch.equal(logits(pre.model, pre.layout, x0), logits(net, layout, x0))  # fp32, bit for bit

    mine = Scorer(layout, schedule, MASK, EOS, layout.training_inputs(CPU))
    want = heldout_nelbo(mine, net, x0, 4, 3, seed=5)
    got = heldout_nelbo(pre.scorer(), pre.model, x0, 4, 3, seed=5)
    assert got == want and want["nelbo"] > 0


def test_config_names_the_format_and_the_weights_it_holds(tmp_path: Path) -> None:
    export_diffusion(trained_like(False), Layout.bd3(8, 4), LogLinearSchedule(), TOK, tmp_path,
                     {"entrypoint": "bd3lm", "steps": 7, "weights": "ema"})
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["format"] == "gputrain-block-diffusion" and config["version"] == 1
    assert (config["entrypoint"], config["steps"], config["weights"]) == ("bd3lm", 7, "ema")
    assert config["tokenizer"] == TOK and config["model"]["vocab_size"] == VOCAB


def test_loading_something_else_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(GputrainError, match="not a block-diffusion export"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(GputrainError, match="expected 'gputrain-block-diffusion'"):
        load_pretrained(tmp_path)
