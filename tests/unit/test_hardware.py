"""GPU catalog and detection parsing: strict names, aliases, recorded nvidia-smi and sinfo output."""

from __future__ import annotations

import pytest

from gputrain.errors import HardwareError
from gputrain.hardware.catalog import catalog, from_gres, from_nvidia_smi, from_runpod_id, get_gpu
from gputrain.hardware.detect import parse_nvidia_smi_csv, parse_sinfo_gres

REQUIRED = ["cpu", "V100-16GB", "V100-32GB", "A100-40GB", "A100-80GB", "H100-80GB", "H100-80GB-PCIe",
            "H200-141GB", "B200-192GB", "L40S", "A10G", "RTX-4090"]


def test_catalog_has_every_required_type_with_its_facts() -> None:
    cat = catalog()
    for name in REQUIRED:
        gpu = cat[name]
        assert gpu.price_source, name
        if name != "cpu":
            assert gpu.memory_gib > 10 and gpu.tflops_fp16 > 0 and gpu.bandwidth_gbs > 0, name
            assert gpu.nvidia_smi and gpu.gres, name
    assert not cat["V100-32GB"].bf16 and cat["V100-32GB"].tflops_bf16 is None
    assert cat["H100-80GB"].fp8 and cat["B200-192GB"].tflops_bf16 > cat["H200-141GB"].tflops_bf16


@pytest.mark.parametrize(("typed", "canonical"), [("b200", "B200-192GB"), ("H200", "H200-141GB"),
                                                  ("h100", "H100-80GB"), ("H100-PCIe", "H100-80GB-PCIe"),
                                                  ("V100", "V100-32GB"), ("rtx_4090", "RTX-4090")])
def test_names_people_type_resolve(typed: str, canonical: str) -> None:
    assert get_gpu(typed).name == canonical


def test_unknown_names_are_errors_never_substitutions() -> None:
    with pytest.raises(HardwareError, match="unknown GPU type 'H300'; did you mean H800 or H200-141GB or H100-80GB"):
        get_gpu("H300")  # a suggestion, never a substitution
    with pytest.raises(HardwareError, match="unknown GPU type 'Q9'; known: cpu"):
        get_gpu("Q9")
    with pytest.raises(HardwareError, match="not in the catalog"):
        from_nvidia_smi("NVIDIA GeForce GTX 1080")


@pytest.mark.parametrize(("smi", "canonical"), [("NVIDIA H100 80GB HBM3", "H100-80GB"),
                                                ("NVIDIA H100 PCIe", "H100-80GB-PCIe"),
                                                ("Tesla V100-SXM2-16GB", "V100-16GB"),
                                                ("Tesla V100-SXM2-32GB", "V100-32GB"),
                                                ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
                                                ("NVIDIA B200", "B200-192GB"), ("NVIDIA H200", "H200-141GB"),
                                                # #28: parts the field's RL runs use; the longest pattern wins
                                                ("NVIDIA GH200 480GB", "GH200"), ("NVIDIA H20", "H20"),
                                                ("NVIDIA A800-SXM4-80GB", "A800-80GB"), ("NVIDIA L40", "L40"),
                                                ("NVIDIA L40S", "L40S"), ("NVIDIA L4", "L4"), ("NVIDIA L20", "L20"),
                                                ("NVIDIA H100 NVL", "H100-NVL"),
                                                ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-Ada"),
                                                ("NVIDIA GeForce RTX 5090", "RTX-5090"),
                                                ("NVIDIA GeForce RTX 3090", "RTX-3090"),
                                                ("NVIDIA GeForce RTX 4090", "RTX-4090")])
def test_nvidia_smi_names_map_to_the_catalog(smi: str, canonical: str) -> None:
    assert from_nvidia_smi(smi).name == canonical


def test_recorded_nvidia_smi_csv() -> None:
    text = "0, NVIDIA H100 80GB HBM3, 81559\n1, NVIDIA H100 80GB HBM3, 81559\n"
    gpus = parse_nvidia_smi_csv(text)
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[0].memory_mib == 81559 and gpus[0].catalog_type().name == "H100-80GB"
    assert parse_nvidia_smi_csv("No devices were found\n") == []


def test_recorded_sinfo_gres() -> None:
    text = "debug*|n1|gpu:volta:2(S:0-1)\ndebug*|n2|gpu:volta:2,shard:4\ncpu|c1|(null)\ngpu|g1|gpu:8\n"
    rows = parse_sinfo_gres(text)
    assert [(r.partition, r.node, r.gres_type, r.count) for r in rows] == [
        ("debug", "n1", "volta", 2), ("debug", "n2", "volta", 2), ("gpu", "g1", None, 8)]
    assert {g.name for g in rows[0].candidates()} == {"V100-16GB", "V100-32GB"}
    assert [g.name for g in from_gres("h100")] == ["H100-80GB"]


def test_runpod_ids_round_trip() -> None:
    for gpu in catalog().values():
        for rid in gpu.runpod_ids:
            assert from_runpod_id(rid).name == gpu.name
