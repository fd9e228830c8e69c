"""The node's side of the kernel decision: detect the device's facts and call the one resolver.

``gputrain.contract.kernels.resolve`` decides; this module only says what this node has (CUDA capability,
bf16, the torch build's FlexAttention, Triton, flash-attn). The planner made the same call with the catalog's
facts; where the node differs (older torch, no Triton), the choice here wins and the job log says why.
"""

from __future__ import annotations

import importlib.util

import torch

from gputrain.contract.kernels import DeviceFacts, KernelChoice, KernelRequest, resolve


def _has_flex() -> bool:
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def detect_facts(device: torch.device | None = None) -> DeviceFacts:
    """Facts of ``device`` (default: CUDA device 0 when there is one, else the CPU)."""
    if device is None:
        device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    common = {"torch_version": torch.__version__, "has_flex": _has_flex(),
              "has_triton": importlib.util.find_spec("triton") is not None,
              "has_flash_attn": importlib.util.find_spec("flash_attn") is not None, "source": "detected"}
    if device.type != "cuda":
        return DeviceFacts(device="cpu", name="cpu", **common)  # type: ignore[arg-type]
    cap = torch.cuda.get_device_capability(device)
    return DeviceFacts(device="cuda", name=torch.cuda.get_device_name(device), capability=(cap[0], cap[1]),
                       bf16=torch.cuda.is_bf16_supported(), **common)  # type: ignore[arg-type]


def decide(req: KernelRequest, device: torch.device) -> KernelChoice:
    return resolve(req, detect_facts(device))
