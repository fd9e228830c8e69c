"""The trained block-diffusion model as it leaves the job: ``model.safetensors`` + ``config.json`` (issue 29).

``<job_dir>/model/`` holds the weights the run evaluated and sampled with (the EMA average when there is one,
as ``result.json``'s ``eval_weights`` says) in safetensors, and a ``config.json`` with everything needed to
score or sample with them and nothing of gputrain's recipe: the ``DiTConfig``, the layout (block id of each
position, which positions are noised, the named loss segments), the tokenizer's name and special ids, and
the noise schedule's ε. :func:`load_pretrained` rebuilds the network from that folder alone::

    from gputrain.train.diffusion.export import load_pretrained
    pre = load_pretrained("JOB/model")          # DiT in eval mode, layout, schedule, ids
    scorer = pre.scorer()                       # the held-out NELBO as the trainer computes it

Checkpoints (``state.pt``) stay for resuming; this folder is what a user takes away. DiT is our own
architecture, so there is no ``transformers`` class to load it: safetensors holds the tensors in the format
every framework reads, and the loader is twenty lines. Written to a temporary folder and renamed, so a
crash never leaves a half-written model where the loader would find it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gputrain.train.diffusion.evaluation import Scorer
from gputrain.train.diffusion.model import DiT, DiTConfig
from gputrain.train.diffusion.objective import Layout
from gputrain.train.diffusion.schedule import LogLinearSchedule
from gputrain.train.runtime.weights_folder import read_weights_config, write_weights_folder

MODEL_DIR = "model"
FORMAT = "gputrain-block-diffusion"
VERSION = 1


@dataclass
class Pretrained:
    """A loaded export: the network and what scoring or sampling with it needs."""

    model: DiT
    layout: Layout
    schedule: LogLinearSchedule
    mask_id: int
    eos_id: int
    config: dict[str, Any]

    def scorer(self, device: torch.device | None = None) -> Scorer:
        """The trainer's scorer (real tokens only, antithetic t) for this model's layout."""
        where = device or next(self.model.parameters()).device
        return Scorer(self.layout, self.schedule, self.mask_id, self.eos_id, self.layout.training_inputs(where))


def export_config(model: DiT, layout: Layout, schedule: LogLinearSchedule, tokenizer: dict[str, Any],
                  extra: dict[str, Any]) -> dict[str, Any]:
    """``config.json``: the architecture (without training-only switches), layout, tokenizer, schedule."""
    arch = asdict(replace(model.cfg, gradient_checkpointing=False, dropout=0.0))  # inference needs neither
    return {"format": FORMAT, "version": VERSION, "architecture": "DiT", "model": arch,
            "layout": {"block_ids": layout.block_ids.tolist(), "noisy_pos": layout.noisy_pos.tolist(),
                       "segments": {k: v.tolist() for k, v in layout.segments.items()}},
            "tokenizer": tokenizer, "noise_eps": schedule.eps, **extra}


def export_diffusion(model: nn.Module, layout: Layout, schedule: LogLinearSchedule, tokenizer: dict[str, Any],
                     job_dir: Path, extra: dict[str, Any] | None = None) -> Path:
    """Write ``job_dir/model`` (rank 0 only: the caller passes the full, unwrapped weights)."""
    if not isinstance(model, DiT):
        raise TypeError(f"export_diffusion needs the DiT itself, got {type(model).__name__}")
    config = export_config(model, layout, schedule, tokenizer, extra or {})
    return write_weights_folder(model, config, job_dir / MODEL_DIR)


def load_pretrained(path: str | Path, device: str | torch.device = "cpu") -> Pretrained:
    """The network of an exported folder, in eval mode, with its layout, schedule and special ids."""
    from safetensors.torch import load_file

    folder = Path(path)
    config = read_weights_config(folder, FORMAT, VERSION, "block-diffusion")
    model = DiT(DiTConfig(**config["model"]))
    model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=True)
    model.to(device).eval()
    lay = config["layout"]
    layout = Layout(torch.tensor(lay["block_ids"], dtype=torch.long), torch.tensor(lay["noisy_pos"], dtype=torch.long),
                    {k: torch.tensor(v, dtype=torch.bool) for k, v in lay["segments"].items()})
    tok = config["tokenizer"]
    return Pretrained(model, layout, LogLinearSchedule(config["noise_eps"]), int(tok["mask_id"]), int(tok["eos_id"]),
                      config)
