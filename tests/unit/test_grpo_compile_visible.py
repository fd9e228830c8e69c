"""Compile is start-up, not step time, in the GRPO trainer (#27).

The trainer's compiled paths (FlexAttention packing, ``train.compile``'s layers) run on CUDA only, so on the
CPU the compile comes from the task's own reward: a real ``torch.compile`` (backend ``eager``: dynamo traces
the function, no C++ build) called inside the second step's scoring, where any code of the step may compile.
The step that compiled carries ``compile_seconds``, its neighbours do not, perf.json's step time (what the
planner calibrates from) is the median of the steps that neither compiled nor came first, and the compile
shows as its own figure in perf.json, result.json and ``gputrain logs``.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch

from gputrain.contract.perf import PERF_FILE, MeasuredPerf
from gputrain.logs.report import render_text
from gputrain.logs.summarize import summarize
from gputrain.train.grpo.task import GRPOTask
from gputrain.train.runtime import perf
from gputrain.train.runtime.checkpoint import CheckpointManager
from gputrain.train.runtime.compile_clock import CompileClock
from gputrain.train.runtime.context import RunContext
from gputrain.train.runtime.metrics import Metrics
from gputrain.train.runtime.precision import make_precision
from gputrain.train.runtime.signals import PreemptionFlag

ROOT = Path(__file__).resolve().parents[2]
SETS = ["model.name=tiny-qwen2", "model.size=tiny", "model.params=2e5", "model.hidden_size=32", "model.num_layers=1",
        "model.num_heads=2", "model.num_kv_heads=2", "model.vocab_size=512", "model.seq_len=48",
        "data.source=generated", "data.format=generated", "train.batch_size=8", "train.max_steps=4",
        "train.precision=fp32", "train.gradient_checkpointing=false", "train.eval_every=100", "train.save_every=100",
        "distributed.strategy=ddp", "resources.gpus=1", "algorithm.num_generations=4",
        "algorithm.train_batch_size=2", "algorithm.max_prompt_length=16", "algorithm.max_completion_length=4",
        "algorithm.rollout_engine=hf", "algorithm.eval_samples=1", "algorithm.warm_start_steps=0",
        "algorithm.prompt_format=raw"]


def context(tmp: Path) -> RunContext:
    from gputrain.planner import make_plan

    plan = make_plan(ROOT / "recipes" / "grpo_math_fsdp.yaml", gpu="cpu", check_memory=False, overrides=SETS)
    cpu = torch.device("cpu")
    return RunContext(rank=0, world_size=1, local_rank=0, device=cpu, plan=plan, job_dir=tmp,
                      precision=make_precision("fp32", cpu), checkpoints=CheckpointManager(tmp / "ck", 0, 1, 1),
                      metrics=Metrics(tmp, plan.recipe, enabled=True), preemption=PreemptionFlag(signals=()))


def compiling_task(compile_on_call: int) -> GRPOTask:
    """A task whose reward compiles a fresh function on its ``compile_on_call``-th scoring (one per step)."""
    calls = [0]

    def score(texts: list[str], rows: list[dict[str, str]]) -> list[list[float]]:
        calls[0] += 1
        lengths = torch.tensor([float(len(t)) for t in texts])
        if calls[0] == compile_on_call:
            lengths = torch.compile(lambda x: x * 0.5 + 1.0, backend="eager", fullgraph=True)(lengths)
        return [[float(v), 0.0] for v in lengths]  # the recipe weighs two components

    rows = [{"prompt": f"{a} plus {a} is"} for a in "123456"]
    return GRPOTask("grpo_math", rows, rows[:1], ["length", "format"], score, corpus=[r["prompt"] for r in rows])


@pytest.mark.slow  # a 4-step GRPO run of a one-layer policy in-process, a plan, one dynamo trace: 3-8 s here
def test_the_step_that_compiled_is_marked_and_left_out_of_the_steady_step_time(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gputrain.train.grpo.trainer import train_grpo

    ctx = context(tmp_path)
    assert train_grpo(ctx, compiling_task(compile_on_call=2)) == 0
    perf.record(ctx.metrics.perf, ctx.device, 1, tmp_path, ctx.metrics, True)  # what ctx.close() does
    ctx.metrics.close()
    measured = MeasuredPerf.model_validate_json((tmp_path / PERF_FILE).read_text())

    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = {r["step"]: r for r in records if "loss" in r}
    assert sorted(steps) == [1, 2, 3, 4]
    assert steps[2].get("compile_seconds", 0) > 0  # the scoring of step 2 ran dynamo
    assert all("compile_seconds" not in steps[s] for s in (1, 3, 4))

    # perf.json: steps 1 (first) and 2 (compiled) are warm-up; the step time is the median of 3 and 4
    assert (measured.warmup_steps, measured.steps_timed) == (2, 2)
    assert measured.step_seconds == pytest.approx(statistics.median([steps[3]["step_seconds"],
                                                                     steps[4]["step_seconds"]]))
    assert measured.compile_seconds == pytest.approx(steps[2]["compile_seconds"], abs=1e-3)
    # the warm-up phase: the wall time of exactly the two steps the steady figure leaves out
    warm = steps[1]["step_seconds"] + steps[2]["step_seconds"]
    assert measured.warmup_seconds == pytest.approx(warm, abs=2e-3)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["compile_seconds"] == pytest.approx(steps[2]["compile_seconds"], abs=1e-3)
    assert result["steady_step_seconds"] == pytest.approx(measured.step_seconds)
    assert result["warmup_seconds"] == pytest.approx(warm, abs=2e-3)
    summary = summarize(tmp_path, final=True, exit_code=0, write=False)  # `gputrain logs`: the compile on its own row
    assert summary["compile_seconds"] == measured.compile_seconds
    assert summary["warmup_seconds"] == measured.warmup_seconds
    assert (f"warm-up {measured.warmup_seconds:.1f} s, compile {measured.compile_seconds:.1f} s of it (start-up"
            in render_text(summary))
    lines = capsys.readouterr().out.splitlines()  # the first step is a phase of the step log, as in diffusion
    assert "[phase] first step (warm-up) ..." in lines
    assert f"[phase] first step (warm-up) done in {steps[1]['step_seconds']:.1f} s" in lines


def test_the_warmup_phase_is_the_left_out_steps_wall_time_and_the_steady_step_excludes_it() -> None:
    """perf.json's bookkeeping from the records a GRPO run logs, with the H100 packed run's shape (2026-11-27):
    a 46.1 s first step that compiled, a 22.0 s recompile, then steady 8.59 / 8.61 s."""
    from gputrain.train.grpo.trainer import steady_step_seconds, warmup_seconds

    log = perf.PerfLog()
    history = [{"step_seconds": 46.1, "compile_seconds": 30.0}, {"step_seconds": 22.0, "compile_seconds": 12.0},
               {"step_seconds": 8.59}, {"step_seconds": 8.61}]
    for n, rec in enumerate(history, 1):
        log.observe({"step": n, "time": 100.0 * n, **rec})
    m = perf.measure(log, torch.device("cpu"), 1)
    assert (m.step_seconds, m.steps_timed, m.warmup_steps) == (pytest.approx(8.6), 2, 2)
    assert m.warmup_seconds == pytest.approx(68.1) and m.compile_seconds == pytest.approx(42.0)
    assert steady_step_seconds(history) == pytest.approx(8.6) and warmup_seconds(history) == pytest.approx(68.1)
    # a padded run: nothing compiles, the first step alone is warm-up (32.4 s on the H100)
    padded = [{"step_seconds": 32.4}, {"step_seconds": 9.69}, {"step_seconds": 8.53}]
    assert warmup_seconds(padded) == pytest.approx(32.4) and steady_step_seconds(padded) == pytest.approx(9.11)
    # two steps: both count (a figure rather than none), so no warm-up is claimed
    assert warmup_seconds(padded[:2]) == 0.0


def test_the_compile_clock_counts_dynamo_compiles_and_nothing_else() -> None:
    clock = CompileClock()
    x = torch.arange(4.0)
    assert clock.lap() == 0.0
    (x * 2).sum()  # eager work is not compile
    assert clock.lap() == 0.0
    fn = torch.compile(lambda t: t.sin() + 1, backend="eager", fullgraph=True)
    fn(x)
    first = clock.lap()
    assert first > 0
    fn(x)  # cached: no compile
    assert clock.lap() == 0.0
    assert clock.total == pytest.approx(first)
