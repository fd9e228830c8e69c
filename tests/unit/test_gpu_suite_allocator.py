"""benchmarks/gpu_suite.py runs its default benches with the allocator settings a GPU launcher exports (#27),
read from their one home, and its before-#27 benches without them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from gputrain.render.allocator_env import GPU_ALLOCATOR_ENV

SUITE = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_suite.py"


def test_suite_benches_use_the_launchers_allocator_env() -> None:
    spec = importlib.util.spec_from_file_location("gpu_suite_under_test", SUITE)
    assert spec is not None and spec.loader is not None
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    assert suite._allocator_env() == GPU_ALLOCATOR_ENV == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert set(suite.NO_ALLOCATOR_ENV) >= set(GPU_ALLOCATOR_ENV) and not any(suite.NO_ALLOCATOR_ENV.values())
    names = [name for name, _, _ in suite.STEPS]
    assert {"bench_default", "bench_pre27", "bench_padded", "bench_no_expandable"} <= set(names)


def test_each_bench_is_planned_with_the_switches_it_runs() -> None:
    """The benches pin the #27 switches; their plans must too, or the old-path benches are held against the
    new defaults' plan (the compiled loss's 8 GiB less) (#28)."""
    spec = importlib.util.spec_from_file_location("gpu_suite_under_test", SUITE)
    assert spec is not None and spec.loader is not None
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    assert set(suite.bench_switch_sets(suite.PRE27)) == {
        "algorithm.loss_kernel=torch", "algorithm.shared_modulation=false", "algorithm.compile_mode=default"}
    assert "algorithm.loss_kernel=compiled" in suite.bench_switch_sets(suite.FAST)
    assert suite.bench_switch_sets(["--attention", "auto"]) == []
    assert "algorithm.ema=0" in suite.BENCH_PLAN_SETS
