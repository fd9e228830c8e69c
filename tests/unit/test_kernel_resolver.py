"""The one kernel resolver against its support matrix (torch version, device, capability, installed parts)."""

from __future__ import annotations

import pytest

from gputrain.contract.kernels import DeviceFacts, KernelError, KernelRequest, resolve

H100 = DeviceFacts(device="cuda", name="NVIDIA H100 80GB HBM3", capability=(9, 0), bf16=True, torch_version="2.11.0",
                   has_flex=True, has_triton=True, has_flash_attn=False, source="detected")
A100 = H100.model_copy(update={"name": "NVIDIA A100-SXM4-80GB", "capability": (8, 0)})
V100 = DeviceFacts(device="cuda", name="Tesla V100-SXM2-32GB", capability=(7, 0), bf16=False, torch_version="2.11.0",
                   has_flex=True, has_triton=True, has_flash_attn=False, source="detected")
T4 = V100.model_copy(update={"name": "Tesla T4", "capability": (7, 5)})
CPU = DeviceFacts(device="cpu", name="cpu", torch_version="2.13.0", has_flex=True, has_triton=True,
                  has_flash_attn=False, source="detected")
CATALOG_H200 = DeviceFacts(device="cuda", name="H200-141GB", bf16=True)  # what the planner knows
CATALOG_V100 = DeviceFacts(device="cuda", name="V100-32GB", bf16=False)
BLOCK = KernelRequest(mask="block")

# (facts, requested attention, requested compile) -> (attention, compile) for the block-diffusion mask
MATRIX = [
    (H100, "auto", "auto", "flex", True),
    (A100, "auto", "auto", "flex", True),
    (CATALOG_H200, "auto", "auto", "flex", True),
    (V100, "auto", "auto", "sdpa", False),
    (T4, "auto", "auto", "sdpa", False),
    (CATALOG_V100, "auto", "auto", "sdpa", False),
    (CPU, "auto", "auto", "sdpa", False),
    (H100.model_copy(update={"torch_version": "2.4.1+cu121"}), "auto", "auto", "sdpa", False),
    (H100.model_copy(update={"has_flex": False}), "auto", "auto", "sdpa", False),
    (H100.model_copy(update={"has_triton": False}), "auto", "auto", "sdpa", False),
    (H100, "sdpa", "auto", "sdpa", False),  # SDPA asked: eager unless compile is asked too
    (H100, "sdpa", True, "sdpa", True),
    (H100, "flex", False, "flex", False),
    (H100, "flash", "auto", "flex", True),  # flash-attn cannot express the block mask
    (V100, "flex", True, "sdpa", True),
    (CPU, "flex", True, "sdpa", False),  # no compile without CUDA
    (H100.model_copy(update={"has_triton": False}), "sdpa", True, "sdpa", False),
]


@pytest.mark.parametrize(("facts", "attention", "compile_", "want_attention", "want_compile"), MATRIX)
def test_block_mask_support_matrix(facts: DeviceFacts, attention: str, compile_: object, want_attention: str,
                                   want_compile: bool) -> None:
    got = resolve(KernelRequest(attention=attention, compile=compile_, mask="block"), facts)  # type: ignore[arg-type]
    assert (got.attention, got.compile) == (want_attention, want_compile), got.reason
    assert got.reason  # every choice says why


def test_fallback_says_why() -> None:
    assert "predates Ampere" in resolve(BLOCK, V100).reason
    assert "2.5" in resolve(BLOCK, H100.model_copy(update={"torch_version": "2.4.0"})).reason
    assert "no CUDA" in resolve(BLOCK, CPU).reason


def test_causal_models_keep_flash_or_sdpa_and_stay_eager() -> None:
    causal = KernelRequest(mask="causal")
    assert resolve(causal, H100).attention == "sdpa"  # flash-attn not installed there
    assert resolve(causal, H100.model_copy(update={"has_flash_attn": True})).attention == "flash"
    assert resolve(causal, CATALOG_H200).attention == "flash"  # assumed on the node: the node decides
    assert resolve(causal, V100.model_copy(update={"has_flash_attn": True})).attention == "sdpa"
    assert not resolve(causal, H100).compile


def test_precision() -> None:
    assert resolve(BLOCK, H100).precision == "bf16"
    assert resolve(BLOCK, V100).precision == "fp16"
    assert resolve(BLOCK, CPU).precision == "fp32"
    with pytest.raises(KernelError, match="no bf16"):
        resolve(KernelRequest(precision="bf16", mask="block"), V100)


def test_planner_and_trainer_agree_where_the_node_has_what_the_catalog_promises() -> None:
    """The plan predicts the path that runs: catalog facts and a detected H200 resolve alike."""
    detected = H100.model_copy(update={"name": "NVIDIA H200"})
    for req in (BLOCK, KernelRequest(mask="block", attention="sdpa"), KernelRequest(mask="causal")):
        a, b = resolve(req, CATALOG_H200), resolve(req, detected)
        assert (a.attention, a.compile, a.precision) == (b.attention, b.compile, b.precision) or \
            req.mask == "causal"  # flash-attn: assumed by the plan, absent on this node
