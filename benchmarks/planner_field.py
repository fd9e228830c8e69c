"""The planner against the field's published RL runs: ``benchmarks/data/planner_field.yaml`` → ``planner_field.md``.

Each row is a published run (URL + the quoted figure) expressed as ``--set`` lines over
``recipes/grpo_math_fsdp.yaml``; the planner plans it for the run's GPUs (``check_memory=True``: a refusal of
a run that really ran is a failure) and the ratio is predicted / published step time.

    python benchmarks/planner_field.py            # rewrites benchmarks/planner_field.md
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data" / "planner_field.yaml"
BASE = ROOT / "recipes" / "grpo_math_fsdp.yaml"


@dataclass
class FieldRow:
    id: str
    url: str
    quote: str
    gpu: str
    gpus: int
    nodes: int
    measured: float
    sets: list[str]
    source: str = ""
    measured_memory_gib: float | None = None
    measured_phases: dict[str, float] | None = None
    quoted_figure: float | None = None  # the source's figure where the step is derived from it (source says how)
    predicted: float | None = None
    phases: dict[str, float] | None = None
    memory_gib: float | None = None
    refused: str = ""

    @property
    def ratio(self) -> float | None:
        return self.predicted / self.measured if self.predicted else None

    @property
    def memory_ratio(self) -> float | None:
        return self.memory_gib / self.measured_memory_gib if self.memory_gib and self.measured_memory_gib else None

    @property
    def framework(self) -> str:
        return self.source.split(" v", 1)[0].split(" (", 1)[0] if self.source else self.id.split("-", 1)[0]


@dataclass
class Unplanned:
    """A published step time the planner cannot take without guessing an input its source does not give."""

    id: str
    url: str
    quote: str
    missing: str


def _flat(items: Any) -> list[str]:
    if isinstance(items, list):
        return [s for item in items for s in _flat(item)]
    return [str(items)]


def known_misses() -> list[str]:
    """The runs the planner is known to miss by more than 2x (each described in planner_field.md's notes)."""
    return list(yaml.safe_load(DATA.read_text(encoding="utf-8")).get("known_misses") or [])


def load() -> tuple[list[FieldRow], float]:
    raw = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    rows = [FieldRow(id=r["id"], url=r["url"], quote=r["quote"], gpu=r["gpu"], gpus=int(r["gpus"]),
                     nodes=int(r.get("nodes", 1)), measured=float(r["measured_step_s"]), sets=_flat(r["sets"]),
                     source=r.get("source", ""), measured_memory_gib=r.get("measured_memory_gib"),
                     measured_phases=r.get("measured_phases"), quoted_figure=r.get("quoted_figure"))
            for r in _section(raw, "runs")]
    return rows, float(raw.get("floor_within_2x", 0.0))


@dataclass
class RanRow:
    """A published configuration that really ran but publishes no step time: the planner must not refuse it."""

    id: str
    url: str
    quote: str
    gpu: str
    gpus: int
    nodes: int
    sets: list[str]
    source: str = ""
    memory_gib: float | None = None
    refused: str = ""


def _section(raw: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The rows of ``name`` and of every later ``name_<suffix>`` list (rows appended at the end of the file by
    engineers working in parallel, e.g. ``ran_sglang``), in file order."""
    return [r for key, rows in raw.items() if key == name or key.startswith(name + "_") for r in rows or []]


def ran() -> list[RanRow]:
    raw = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    return [RanRow(id=r["id"], url=r["url"], quote=r["quote"], gpu=r["gpu"], gpus=int(r["gpus"]),
                   nodes=int(r.get("nodes", 1)), sets=_flat(r["sets"]), source=r.get("source", ""))
            for r in _section(raw, "ran")]


def _plan(row: FieldRow | RanRow | MemoryRow) -> Any:
    """The row's plan, or None with the refusal recorded on the row."""
    from gputrain.errors import GputrainError
    from gputrain.planner import make_plan

    try:
        return make_plan(BASE, gpu=row.gpu, gpus_per_node=row.gpus, nodes=row.nodes, overrides=row.sets)
    except GputrainError as exc:
        row.refused = exc.message
        return None


def plan_ran(rows: list[RanRow]) -> list[RanRow]:
    for row in rows:
        if (plan := _plan(row)) is not None:
            row.memory_gib = plan.estimate.memory_gib_per_gpu
    return rows


@dataclass
class MemoryRow:
    """A published peak memory per GPU of an RL trainer, with no step time the planner's step can be held
    against (a trainer benchmark on fake data): the planner's GiB/GPU against it, the issue's 1.5x goal."""

    id: str
    url: str
    quote: str
    gpu: str
    gpus: int
    nodes: int
    measured_memory_gib: float
    sets: list[str]
    source: str = ""
    trainer_gpus: int | None = None  # where the plan adds vLLM server GPUs the benchmark did not use
    memory_gib: float | None = None
    refused: str = ""

    @property
    def memory_ratio(self) -> float | None:
        return self.memory_gib / self.measured_memory_gib if self.memory_gib else None

    @property
    def framework(self) -> str:
        return self.source.split(" (", 1)[0].split(",", 1)[0] if self.source else self.id.split("-", 1)[0]


def memory_rows() -> list[MemoryRow]:
    raw = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    return [MemoryRow(id=r["id"], url=r["url"], quote=r["quote"], gpu=r["gpu"], gpus=int(r["gpus"]),
                      nodes=int(r.get("nodes", 1)), measured_memory_gib=float(r["measured_memory_gib"]),
                      sets=_flat(r["sets"]), source=r.get("source", ""), trainer_gpus=r.get("trainer_gpus"))
            for r in _section(raw, "memory")]


def plan_memory(rows: list[MemoryRow]) -> list[MemoryRow]:
    for row in rows:
        if (plan := _plan(row)) is not None:
            row.memory_gib = plan.estimate.memory_gib_per_gpu
    return rows


def unplanned() -> list[Unplanned]:
    raw = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    return [Unplanned(**r) for r in _section(raw, "unplanned")]


def plan_rows(rows: list[FieldRow]) -> list[FieldRow]:
    for row in rows:
        if (plan := _plan(row)) is None:
            continue
        row.predicted = plan.estimate.step_seconds
        row.memory_gib = plan.estimate.memory_gib_per_gpu
        row.phases = dict(plan.estimate.phases)
    return rows


def summary(rows: list[FieldRow], memory_only: list[MemoryRow] | None = None) -> dict[str, float]:
    ratios = [r.ratio for r in rows if r.ratio]
    spread = [max(x, 1 / x) for x in ratios]
    memory = [r.memory_ratio for r in [*rows, *(memory_only or [])] if r.memory_ratio]
    return {"rows": len(rows), "refused": sum(1 for r in [*rows, *(memory_only or [])] if r.refused),
            "within_2x": sum(1 for x in spread if x <= 2) / len(rows) if rows else 0.0,
            "median_ratio": statistics.median(ratios) if ratios else 0.0,
            "worst_ratio": max(ratios, key=lambda x: max(x, 1 / x)) if ratios else 0.0,
            "memory_rows": len(memory),
            "memory_within_1_5x": sum(1 for x in memory if max(x, 1 / x) <= 1.5) / len(memory) if memory else 1.0,
            "memory_median_ratio": statistics.median(memory) if memory else 0.0,
            "memory_worst_ratio": max(memory, key=lambda x: max(x, 1 / x)) if memory else 0.0}


def by_framework(rows: list[FieldRow]) -> dict[str, dict[str, float]]:
    """Step-time figures per framework: rows, share within 2x, median and worst ratio."""
    out: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(r.framework for r in rows):
        ratios = [r.ratio for r in rows if r.framework == name and r.ratio]
        n = sum(1 for r in rows if r.framework == name)
        out[name] = {"rows": n, "within_2x": sum(1 for x in ratios if max(x, 1 / x) <= 2) / n,
                     "median_ratio": statistics.median(ratios) if ratios else 0.0,
                     "worst_ratio": max(ratios, key=lambda x: max(x, 1 / x)) if ratios else 0.0}
    return out


def _cell(quote: str) -> str:
    """A quoted table row inside a markdown table cell: its pipes escaped."""
    return quote.replace("|", "\\|")


def _phase_lines(rows: list[FieldRow]) -> list[str]:
    """Published phase times against the predicted ones, where the source prints a breakdown."""
    shown = [r for r in rows if r.measured_phases and r.phases]
    if not shown:
        return []
    lines = ["", "## Phases, where the source prints them (published / predicted seconds)", "",
             "| run | update | weight sync | rollout | log-probs |", "|---|---|---|---|---|"]
    for r in shown:
        assert r.measured_phases is not None and r.phases is not None
        cells = []
        for name in ("update", "sync", "rollout", "logprob"):
            pred = r.phases.get(name, 0.0) + (r.phases.get("host_copies", 0.0) if name == "sync" else 0.0)
            published = f"{r.measured_phases[name]:g}" if name in r.measured_phases else "-"  # not printed
            cells.append(f"{published} / {pred:.0f}")
        lines.append(f"| {r.id} | " + " | ".join(cells) + " |")
    return lines


def _memory_lines(rows: list[MemoryRow]) -> list[str]:
    if not rows:
        return []
    lines = ["", "## Published peak memory per GPU (trainer benchmarks, no step time to hold)", "",
             "| run | framework | GPUs | published GiB/GPU | predicted GiB/GPU | ratio | source (quoted) |",
             "|---|---|---|---|---|---|---|"]
    for m in rows:
        gpus = f"{m.nodes}×{m.gpus} {m.gpu}" if not m.trainer_gpus else f"{m.trainer_gpus} {m.gpu} (trainer)"
        pred = "REFUSED: " + m.refused if m.refused else f"{m.memory_gib:.1f}"
        ratio = f"{m.memory_ratio:.2f}" if m.memory_ratio else "-"
        lines.append(f"| {m.id} | {m.framework} | {gpus} | {m.measured_memory_gib:g} | {pred} | {ratio} | "
                     f"[source]({m.url}): `{_cell(m.quote)}` |")
    return lines


def _framework_lines(rows: list[FieldRow]) -> list[str]:
    lines = ["", "| framework | step rows | within 2× | median ratio | worst ratio |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {f['rows']:.0f} | {f['within_2x']:.0%} | {f['median_ratio']:.2f} | {f['worst_ratio']:.2f} |"
              for name, f in by_framework(rows).items()]
    return lines


def markdown(rows: list[FieldRow], memory_only: list[MemoryRow] | None = None) -> str:
    memory_only = memory_only if memory_only is not None else plan_memory(memory_rows())
    s = summary(rows, memory_only)
    lines = ["# The planner against the field's published RL runs", "",
             "Written by `python benchmarks/planner_field.py` from `benchmarks/data/planner_field.yaml` (each run as "
             "`--set` lines over `recipes/grpo_math_fsdp.yaml`); checked in CI by `tests/unit/test_planner_field.py`. "
             "Ratio = predicted / published step time.", "",
             f"**{s['rows']} runs: {s['within_2x']:.0%} within 2×, median ratio {s['median_ratio']:.2f}, worst "
             f"{s['worst_ratio']:.2f}, {s['refused']} refused; "
             + (f"memory published for {s['memory_rows']} runs: {s['memory_within_1_5x']:.0%} within 1.5×, median "
                f"ratio {s['memory_median_ratio']:.2f}, worst {s['memory_worst_ratio']:.2f}"
                if s["memory_rows"]
                else "no planned run's source publishes memory per GPU (EasyR1's, below, is unplanned)") + ".**",
             *_framework_lines(rows), "",
             "| run | framework | GPUs | published step | predicted step | ratio | predicted GiB/GPU "
             "| source (quoted) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pred = "REFUSED: " + r.refused if r.refused else f"{r.predicted:.0f} s"
        ratio = f"{r.ratio:.2f}" if r.ratio else "-"
        mem = f"{r.memory_gib:.0f}" if r.memory_gib else "-"
        if r.measured_memory_gib:
            mem += f" (published {r.measured_memory_gib:g})"
        step = f"{r.measured:g} s" + (" (derived)" if r.quoted_figure else "")
        lines.append(f"| {r.id} | {r.framework} | {r.nodes}×{r.gpus} {r.gpu} | {step} | {pred} | {ratio} | "
                     f"{mem} | [source]({r.url}): `{_cell(r.quote)}` |")
    lines += _phase_lines(rows)
    lines += _memory_lines(memory_only)
    accepted = plan_ran(ran())
    if accepted:
        lines += ["", "## Runs that really ran, no step time published (the planner must not refuse them)", "",
                  "| run | GPUs | plan | predicted GiB/GPU | source (quoted) |", "|---|---|---|---|---|"]
        lines += [f"| {a.id} | {a.nodes}×{a.gpus} {a.gpu} | {'REFUSED: ' + a.refused if a.refused else 'accepted'} | "
                  f"{f'{a.memory_gib:.0f}' if a.memory_gib else '-'} | [source]({a.url}): `{_cell(a.quote)}` |"
                  for a in accepted]
    skipped = unplanned()
    if skipped:
        lines += ["", "## Published but not planned (an input the source does not give)", "",
                  "| run | missing | source (quoted) |", "|---|---|---|"]
        lines += [f"| {u.id} | {u.missing} | [source]({u.url}): `{_cell(u.quote)}` |" for u in skipped]
    lines += ["", NOTES]
    return "\n".join(lines) + "\n"


NOTES = """## Reading the table

- Every row is a configuration the source states, at the commit or page linked; where the source leaves a
  value out, the row's `source` field in `benchmarks/data/planner_field.yaml` says which recipe file supplied it.
- Step times: three frameworks are planned: NeMo RL (two training backends, Megatron and DTensor/FSDP2), AReaL (v0.1.2's
  logged 16-node run: its task line, the launch script at the same tag and the same step's logged mean lengths)
  and verl (v0.3.0.post0 on 8 H100 and on 8 MI300X, two GRPO rows each of AMD's ROCm blog: the blog prints
  throughput, the step is derived with the tokens per step and the lengths of a log verl's docs link for
  the same model, data and lengths; each row's `source` says how). verl releases vLLM's memory while
  training (sleep level 1, or its
  weights offloaded on vLLM 0.6.3: `algorithm.vllm_sleep_mode=true`); without it the Qwen2-7B row (share 0.6)
  is refused at 103 GiB. TRL and OpenRLHF: their documentation and READMEs (read at their July/August 2026 snapshots)
  publish no per-step time of a GRPO run with its configuration; the TRL co-location blog (June 2025) gives
  speed-ups as plots only, and the Liger GRPO blog plots peak memory against batch size without naming the
  GPU; an open-r1 issue times only a first step, and open-r1's README (March 2025) a whole 7B epoch ("about 3
  hours" on 8 H100) without its completion lengths. OpenRLHF's README until 2024 timed 1024
  prompts of PPO with a critic and a reward model on A800s (and called the data outdated), a workload this
  schema does not express; its paper's long-CoT comparison with verl is not in a form read here. slime's docs
  (August 2026) print no step time; its fork Miles timed a run on MI300X. verl's other published step times and
  logs (verl-data's logs, all branches, name no device), EasyR1's baselines (memory per GPU of a
  vision-language model), AReaL's later README table, verl's DeepSeek page and verl/rLLM issue threads
  each lack an input (listed above with what is missing). No row is made up for any of them. Read again
  for #28 (2026-11-27): a TRL issue thread (a 13B on 8 A800, ~7 min a step) and halo's v1.3.0rc1 release
  (Qwen3.5-35B-A3B on 16 B300, seconds per 1k response tokens) lack an input too (listed above); OpenRLHF's
  performance guide and ROLL's, SkyRL's and slime's documentation print no step time with its configuration.
- Memory rows (prime-rl, the first source here with peak memory per GPU of text-only RL training): its trainer
  benchmark table (Qwen3-0.6B, 4B and 30B-A3B, full and LoRA r=16, 16K and 64K tokens per micro-batch, 1-8
  H100/H200 and 4 A6000). The benchmark runs the trainer alone on fake data, so its step (one micro-batch) is
  not an RL step and only memory is held. Two terms come from prime-rl's code at the benchmark's commit: its
  log-prob head loops over vocabulary chunks of 2048 (`FusedOutputLinear`, plan-only
  `algorithm.logprob_vocab_chunk`: a `[T, 2048]` working set instead of `[T, V]`), and torch FSDP shards the
  model as loaded, fp32, LoRA's frozen base included (the planner held it in bf16). Before them 9 of the 15
  rows were refused as not fitting (the 64K ones at ~200 GiB planned) and the others were 2.1-9.6x over. A
  third term (#28) is the MoE layer's routing activations (`gputrain/planner/moe_memory.py`, plan-only model
  fields `model.experts_per_token`, `model.num_experts`), read from prime-rl's `layers/moe.py`: per token and
  routed expert the bf16 gathered input of the grouped GEMMs and the fp32 copy of the experts' output kept by
  the score multiply, and in the recomputed layer's backward three fp32 copies more (18 x top-k x H bytes a
  token, ~288 KB for Qwen3-30B-A3B). It moves the four 30B-A3B rows from 0.62-0.89 to 0.89-0.95. The "Offload"
  rows (activations offloaded to the host) are planned with `memory.activations_on_host` (below).
- Runs that ran without a published step are held for refusals only. verl's least-resource Qwen2-7B GRPO
  (2 H800, actor parameters and optimizer offloaded around the rollout, vLLM asleep during the update) is
  accepted with GSM8K's lengths (62 GiB planned of 79.6; 73 before verl's fp32-only FSDP parameters and its
  in-place log-prob head, `algorithm.logits_in_place`, were priced); at the maximum response length it is refused
  (~89 GiB), and without either `algorithm.vllm_sleep_mode` or `memory.offload_during_rollout` (verl v0.4 does
  both) it is refused at longer lengths: a verl row needs both set. Three more of verl's least-resource
  configurations are accepted: Qwen2.5-Coder-14B GRPO on 4 H800 (refused at the maximum lengths, ~90 GiB),
  Qwen2.5-32B GRPO with Megatron TP 8 on 8 H20 and Qwen2.5-7B GRPO-LoRA on one H100 (both accepted at the
  maximum lengths too); their lengths are assumed (each row says so). The v0.3 rows do not set
  `logits_in_place`: verl v0.3.0.post0 computes the entropy with gradients and calls the cross-entropy without
  `inplace_backward`, so several `[T, V]` copies live, as the planner's default term prices.
- AReaL's 7B run is a miss (predicted 0.44x). Read from realhf at v0.1.2, the planner's terms are the run's:
  vLLM on 64 GPUs disjoint from training (server mode), all 1024 sequences of an engine submitted at once
  (realhf/impl/model/backend/vllm.py, continuous batching capped at `max_num_seqs` 128: no schema field; the
  cap alone is worth ~100 s of decode by bandwidth, not the ~1300 s gap), packed micro-batches, DP 32 x PP 2
  Megatron-core training with bf16 reduction. The planner even adds an old-policy log-prob pass that realhf
  skips (the PPO loss takes the generation's log-probs; no schema field says so). The log prints no phase
  times, so where the ~1300 s go (realhf's training efficiency at 8K-token packed sequences, the tail of
  16K-token completions, 12 % of them truncated) cannot be read from the source: kept as a miss, no factor.
  Training at ~15 % MFU instead of the planner's default 35 % would double its ~600 s of log-prob and update
  passes; no source gives realhf's MFU for this run, so none is set.
- The MI300X rows (the catalog's MI300X: AMD's datasheet, 1307 dense BF16 TFLOP/s, 5.3 TB/s) are priced with the
  efficiencies the planner uses on NVIDIA parts: no source gives ROCm's for these kernels. verl v0.3-v0.5 decode
  without CUDA graphs (the rollout config's `enforce_eager: True`, not overridden by the blog's commands):
  `algorithm.vllm_enforce_eager=true` prices eager kernel launches (0.81 / 0.57 / 0.62 / 0.50 before, graphed).
  Both Qwen2-7B rows stay under (0.67, 0.63). Not priced for verl, each read from its code at v0.3-v0.4: the
  vLLM 0.6.3 weight reload and KV-cache re-allocation every step (`free_cache_engine`), and log-prob passes in
  fixed micro-batches of 40 sequences per GPU for Qwen2 (110 for DeepSeek) instead of a token budget.
- Mixture-of-experts rows (Qwen3-30B-A3B): the log-prob and update passes run at the dense efficiency times
  Megatron-Core's published MoE shortfall on the system (Megatron-Bridge 26.04.01, Qwen3-30B-A3B / Llama3-70B
  model TFLOP/s: 0.282 on H100, 0.360 on GB200; `gputrain/planner/moe.py`, `benchmarks/PLANNER.md`), not a
  factor fitted to these rows. Where NeMo RL prints phases (v0.3 blog), policy training is now 28 s predicted
  against 50 s published and log-probs 19 against 23 (9 and 6 before). The published figure is of Megatron's
  best MoE path (DeepEP dispatcher, fused permutation); the RL runs use the all-to-all or all-gather dispatcher,
  unfused permutation (v0.4-v0.5) and no load-balancing loss on a frozen router, which is not priced: the two
  GB200 1-step-off rows (training on 8-16 GPUs sets their step) are still under by more than 2x.
- SGLang rollouts (#28, plan-only `algorithm.rollout_engine=sglang`, `memory.sglang_mem_fraction_static`; derivation
  in `benchmarks/PLANNER.md`): no run with SGLang rollouts publishes a step time with the inputs a plan needs
  (slime's docs and issues, AReaL's v0.2/v0.3 tables, verl's SGLang worker docs and #1208, the Miles MI300X blog:
  each lacks the mean response length, the GPU or a critic-free setup; listed above where a figure exists). slime's
  Qwen3-4B and Qwen3-30B-A3B examples on 8 H100 (colocated, SGLang share 0.7, tp 2 and 8) are held for refusals.
- More frameworks (#28, 2026-11-27): RLinf's "Comparison with VeRL" blog times one configuration in both
  frameworks (DeepSeek-R1-Distill-Qwen-1.5B, 8 H100, 32 prompts x 16, up to 27,648 new tokens, ~14K on
  average): RLinf 346 s (0.83x), verl v0.5.0 363 s (0.62x). RLinf's SGLang engines run at most 64 requests
  each (`max_running_requests`), so each engine's 128 sequences decode in two waves
  (`algorithm.vllm_max_num_seqs`; 0.64x without it). verl's command is not printed: its rollout is planned
  graphed, as the blog's verl script for the 7B run (SGLang) runs; with v0.5.0's vLLM default
  `enforce_eager: True` it would be 1.51x. Read for step times with their configuration and found none
  (a run's step time needs the GPU, the batch and the mean lengths): OpenRLHF (README and its history: the
  DSChat table is PPO with a critic), ROLL's docs, ms-swift's docs (TreePO's table names no GPU; maintainer
  speed tests in issue #3302 are images), TRL's docs, Oat's docs (whole-run hours), EasyR1 (vision-language,
  above), SkyRL's docs (hybrid-attention models, above), Unsloth's pages (capacity claims, no step).
- prime-rl's four 1xH100 "Offload" rows (#28, 2026-11-27), the same runs as four "Recompute" rows with
  `--model.ac-offloading` (torchtune's `OffloadActivations` around the forward): the tensors the forward saves,
  under recomputation the layer inputs, go to pinned host memory (`memory.activations_on_host`, plan-only).
  The published drop is those inputs' bf16 bytes (Qwen3-0.6B at 64K: 28 x 65,536 x 1,024 x 2 = 3.5 GiB
  against 19.6 -> 16.1; Qwen3-4B LoRA at 64K: 11.3 GiB against 42.0 -> 31.1). Planned 0.98, 1.17, 0.97, 0.93;
  planned as "Recompute" they were 1.20, 1.61, 1.11, 1.29. The copies' time is not priced (the published step
  grows 2-3 %).
- Ten rows added for #28 (2026-11-27; first-read ratios, before any planner change, in benchmarks/RESULTS.md):
  DeepScaleR's 8K stage as a user timed it on 8 H200 and on 8 A100 (rllm issue 29: 396 s and 394 s, the
  repository's script; the mean response from DeepScaleR's blog), a verl GRPO of Qwen3-4B on four 48 GB RTX
  4090s with its logged lengths and phases (verl issue 7412; the catalog gains RTX-4090-48GB), NeMo RL v0.6's
  8-step off-policy Qwen3-30B-A3B run on 192 H100 and its six Qwen3-235B-A22B runs (128/256 H100, 64/128 GB200).
  Two mechanisms came from them: the old-policy log-prob pass as the framework runs it
  (`algorithm.old_logprob_pass`: verl's trainer and NeMo RL's recompute it every step, AReaL uses the rollout's;
  verl 7412's log-prob phases are now 143 s planned against 144 s logged), and asynchrony deeper than one step
  (`algorithm.off_policy_steps` k > 1, which the schema refused: generation runs on, its engines decode up to k
  batches at once, a batch's tail overlaps the next; the 8-step row went from 1.85 planned as one step to 0.71).
  AReaL's row, set to skip the pass as realhf does, went from 0.44 to 0.39. Not priced, so misses: the 235B
  runs on 128 GB200 (0.37) and the 256-H100 on-policy one (0.50); Megatron-Bridge's published Qwen3-235B-A22B
  training figures (253 model TFLOP/s on H100, 840 on GB200) put its training *faster* than the planner's MoE
  term, so the gap is elsewhere (the vLLM TP 16 engines span two H100 nodes; refit of 470 GB of weights), and
  DeepScaleR on 8 H200 (0.50; the same 394-396 s on A100 and H200 says the step is bound by the host, vLLM
  0.6.3's eager decode with per-token log-probs, which the planner prices at 138 s of rollout on both).
  Read again for #28 and not planned (no step time with its inputs): TRL's docs and its co-location blog (plots),
  OpenRLHF's and ROLL's docs (metric names only), SkyRL's Megatron table (phases, listed above), verl's
  truncate-padding benchmark (listed above), AReaL's v0.1 blog (plots) and LlamaRL's paper (lengths unstated);
  verl's fully-async H20 table planned with an assumed mean response came out 1.4-16.5x over, so it stays
  unplanned.
- Second round for #28 (2026-11-27; first read in benchmarks/RESULTS.md): NeMo RL's v0.4 page as it stood at
  c31fb93 (Qwen3-235B on 128 H100 on-policy, 506 s: 0.39 first read; 1-step off on 256 H100, 241 s: 0.96) and
  the draft v0.4 page's PyTorch DTensor Llama 8B on 16 H100 (114.9 s: 0.76). Every row where the source prints
  phases had its weight sync under (5-12 s published, ~1 s planned). One mechanism priced from the code: a
  colocated engine in sleep mode releases its whole memory share every step and maps it again at wake-up
  (vLLM's ``CuMemAllocator``: ``unmap_and_release`` / ``create_and_map`` per allocation; SGLang's
  torch_memory_saver), at the rate vLLM logs for it (TRL issue 4086: 51.57 GiB freed in 1.46-1.60 s), 2.8 s a
  step at share 0.6 of an H100 instead of the flat 0.5 s. Llama 8B's sync is now 4 / 3 s planned against 5 / 4;
  the 32B and 30B-A3B rows stay under (4 against 7 and 12: gathering Megatron's TP/PP/EP shards into vLLM's
  layout is not priced), as does verl 7412 (2 against 5.83). A second mechanism: a tensor-parallel engine's two
  all-reduces per layer per decode step run on the stream between the layers' kernels (vLLM's
  RowParallelLinear), so they add to the step, at NCCL's latency model (tuning.cc: 10 us for 8 GPUs on NVLink,
  26 us for 16 over two nodes; GB200 NVL72 is one NVLink domain). The 235B rows rose from 0.37-0.51 to
  0.41-0.63; the 256-H100 on-policy row (0.63) and DeepScaleR on H200 (0.515, marginal) left the miss list.
  v0.4's 235B on-policy run stays a miss (0.47; v0.4's 506 s for the recipe v0.6 ran in 395 s also shows ~30 %
  between releases), and so do the GB200 235B rows (0.41), whose published steps are close to H100's although
  the planner's decode is bound by a bandwidth 2.4x H100's: what sets their decode step is not in a source
  read here. Read for this round and not planned (an input missing): slime issues 385 and 1072, NeMo RL issue
  1275, verl issues 3277, 3816, 2060, 1580 and 1208, verl PR 7833 (Qwen3.5's hybrid attention)."""


def main() -> int:
    text = markdown(plan_rows(load()[0]))
    (ROOT / "benchmarks" / "planner_field.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
