"""Before/after per seed for the RL and GNN ``cpu`` profiles, scored by each job's own evaluator (issue 29).

For each seed, two runs of the README command: the training itself, and a "before" run of the same
recipe and seed that takes one optimizer step at a learning rate of 1e-12 (the schema refuses 0 steps and a
zero rate)::

    for s in 0 1 2; do
      gputrain run recipes/X.yaml --gpu cpu --gpus 2 --set train.seed=$s --logs-dir runs/X/seed$s
      gputrain run recipes/X.yaml --gpu cpu --gpus 2 --set train.seed=$s --set train.max_steps=1 \\
          --set train.learning_rate=1e-12 --logs-dir runs/X/init$s
    done
    PYTHONPATH=. python benchmarks/profile_seeds.py --before runs/X/init*/*_job_* --after runs/X/seed*/*_job_*

Why a 1e-12 step and not a separate scorer: the job's final evaluation is then the figure for both (same
prompts, decoding, sandbox, graphs), and a fp32 weight of magnitude ~1e-2 moves by ~1e-12 — below its
rounding step (~1e-9) — so the "before" job scores the initial weights its seed draws (a weight drawn as
exactly 0 becomes ~1e-12) through the very code that scores the trained model. ``after``: the trained
job's ``result.json`` as written.

Headline per entrypoint (``plan.json``'s ``recipe.entrypoint``) and its best constant answer:

- ``grpo_math`` / ``gdpo``: ``eval_accuracy`` (greedy answers to the held-out problems); constant: the
  accuracy of the single most frequent reference answer of those problems (``eval_samples.jsonl``).
- ``grpo_code``: ``eval_pass_rate`` (share of the held-out tasks' asserts passed); constant: the best one
  completion given to every task, searched over every string of up to 3 characters of the toy alphabet
  (the ``cpu`` profile's task) and re-scored in the real sandbox.
- ``gnn_coloring``: ``colours_network_short_search`` (mean colours of the network-seeded Tabucol q-search
  with the short move budget, ``algorithm.short_search_moves``, on the test graphs; lower is better);
  constant: ``colours_random_short_search``, the same search from a random start at the same budget (no
  learning at all). The full-budget pair (``search_moves``, where both starts reach the same colours on
  these small graphs) and the network alone (conflicts per edge at q) are printed beside it.

Criterion of issue 29: mean gain more than twice the spread (max - min) of the gains over at least 3 seeds,
and every seed's ``after`` strictly better than the best constant answer.

Jobs with a supervised warm start (``algorithm.warm_start_steps``; the math/GDPO ``cpu`` profiles since issue
29) evaluate the held-out problems themselves at init and after the warm start (``result.json``'s
``warm_start``), so no before-runs are needed: ``--warm-start runs/X/seed*/*_job_*`` prints init / warm start /
after GRPO per seed and three verdicts -- the job (init -> after), what GRPO adds to the greedy held-out
accuracy (warm start -> after), and what GRPO adds to its own objective, the sampled correctness of its
rollouts (training ``correctness`` reward, first 10 -> last 10 steps).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Headline:
    key: str
    label: str
    higher_is_better: bool
    constant_label: str


HEADLINES: dict[str, Headline] = {
    "grpo_math": Headline("eval_accuracy", "accuracy", True, "most frequent answer"),
    "gdpo": Headline("eval_accuracy", "accuracy", True, "most frequent answer"),
    "grpo_code": Headline("eval_pass_rate", "tests passed", True, "best constant completion"),
    "gnn_coloring": Headline("colours_network_short_search", "colours (net+Tabucol, short budget)", False,
                             "random-start Tabucol, same budget"),
}


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def job_facts(job: Path) -> tuple[str, int, dict[str, Any]]:
    """(entrypoint, seed, result.json) of a finished job folder."""
    recipe = _json(job / "plan.json")["recipe"]
    return str(recipe["entrypoint"]), int(recipe["train"]["seed"]), _json(job / "result.json")


def most_frequent_answer(job: Path) -> float:
    """Accuracy of answering every held-out problem with its commonest reference answer (last evaluation)."""
    from gputrain.train.math_rl.answers import answers_equal

    rows = [json.loads(line) for line in (job / "eval_samples.jsonl").read_text().splitlines() if line.strip()]
    last = max(r["eval"] for r in rows)
    truths = [r["truth"] for r in rows if r["eval"] == last]
    return max(sum(answers_equal(t, c) for t in truths) for c in set(truths)) / len(truths)


def _local_pass_rate(completion: str, tasks: Sequence[Any]) -> float:
    """Share of asserts passed by ``prompt + completion`` on the toy tasks, run here: the candidates are this
    script's own strings over ``x+-*0-9``, not model output (the winner is re-scored in the sandbox)."""
    passed = total = 0
    for task in tasks:
        space: dict[str, Any] = {}
        try:
            exec(task["prompt_code"] + completion + "\n", space)
        except Exception:
            space = {}
        for test in task["tests"]:
            total += 1
            try:
                exec(test, dict(space))
                passed += 1
            except Exception:
                pass
    return passed / max(1, total)


def best_constant_completion(job: Path, max_len: int = 3) -> tuple[str, float]:
    """(completion, sandbox pass rate) of the best single completion for every held-out task of the job."""
    from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
    from gputrain.recipe.schema import DataSpec
    from gputrain.train.code_reward import score_completions_detailed
    from gputrain.train.code_reward.toy import TOY_ALPHABET
    from gputrain.train.grpo_code import load_code_tasks
    from gputrain.train.sandbox import SandboxLimits

    recipe = _json(job / "plan.json")["recipe"]
    algo = GRPOAlgorithm.model_validate(recipe["algorithm"])
    _, held_out = load_code_tasks(DataSpec.model_validate(recipe["data"]), int(recipe["train"]["seed"]),
                                  algo.eval_dataset)
    tasks = held_out[: algo.eval_samples]
    candidates = ("".join(p) for n in range(1, max_len + 1) for p in itertools.product(TOY_ALPHABET, repeat=n))
    best = max(candidates, key=lambda c: _local_pass_rate(c, tasks))
    limits = SandboxLimits(test_seconds=algo.sandbox_timeout_s, wall_seconds=2 * algo.sandbox_timeout_s)
    scores = score_completions_detailed([best] * len(tasks), tasks, workers=2, limits=limits)
    return best, sum(s.reward for s in scores) / max(1, len(scores))


def constant_score(entry: str, job: Path, result: dict[str, Any]) -> tuple[float, str]:
    """The best constant answer's score on the job's own evaluation set, and what it is."""
    if entry in ("grpo_math", "gdpo"):
        return most_frequent_answer(job), ""
    if entry == "grpo_code":
        completion, rate = best_constant_completion(job)
        return rate, f"`{completion}`"
    if entry == "gnn_coloring":
        return float(result["colours_random_short_search"]), ""
    raise SystemExit(f"{job}: entrypoint {entry!r} has no headline here (diffusion: diffusion_seeds.py)")


@dataclass(frozen=True)
class SeedRow:
    seed: int
    before: float
    after: float
    constant: float
    higher_is_better: bool
    steps: int
    extra: str = ""

    @property
    def gain(self) -> float:
        return self.after - self.before if self.higher_is_better else self.before - self.after

    @property
    def beats_constant(self) -> bool:
        return self.after > self.constant if self.higher_is_better else self.after < self.constant


@dataclass(frozen=True)
class Verdict:
    mean_gain: float
    spread: float
    gain_met: bool
    beats_constant: bool

    @property
    def met(self) -> bool:
        return self.gain_met and self.beats_constant


def verdict(rows: Sequence[SeedRow]) -> Verdict:
    """Issue 29's criterion: mean gain > 2 x (max - min) of the gains over >= 3 seeds, every seed past the
    best constant answer."""
    gains = [r.gain for r in rows]
    mean, spread = statistics.mean(gains), max(gains) - min(gains)
    return Verdict(mean, spread, len(rows) >= 3 and mean > 2 * spread, all(r.beats_constant for r in rows))


def gnn_extra(before: dict[str, Any], after: dict[str, Any]) -> str:
    moves = after.get("search", {}).get("moves_per_q", "full")
    return (f"full budget ({moves} moves/q): net {before['colours_network_search']:.3f} -> "
            f"{after['colours_network_search']:.3f}, random start {after['colours_random_search']:.3f}; "
            f"net alone conflicts/edge {before['network_conflicts_per_edge']:.3f} -> "
            f"{after['network_conflicts_per_edge']:.3f} (random {after['random_conflicts_per_edge']:.3f}); "
            f"moves saved (median) {after['moves_saved_vs_random_search_median']:g}")


def collect(before_jobs: Sequence[Path], after_jobs: Sequence[Path],
            constant: Callable[[str, Path, dict[str, Any]], tuple[float, str]] = constant_score,
            ) -> tuple[Headline, list[SeedRow]]:
    """One row per seed: the before job and the after job of that seed, one entrypoint throughout."""
    befores = {seed: (entry, res) for entry, seed, res in map(job_facts, before_jobs)}
    rows: list[SeedRow] = []
    entries: set[str] = set()
    for job in after_jobs:
        entry, seed, after = job_facts(job)
        if seed not in befores:
            raise SystemExit(f"{job}: no --before job for seed {seed}")
        before_entry, before = befores[seed]
        entries |= {entry, before_entry}
        if len(entries) != 1:
            raise SystemExit(f"jobs of several entrypoints: {sorted(entries)}")
        head = HEADLINES.get(entry)
        if head is None:
            raise SystemExit(f"{job}: entrypoint {entry!r} has no headline here (diffusion: diffusion_seeds.py)")
        value, what = constant(entry, job, after)
        extra = gnn_extra(before, after) if entry == "gnn_coloring" else what
        rows.append(SeedRow(seed, float(before[head.key]), float(after[head.key]), value, head.higher_is_better,
                            int(after["steps"]), extra))
    if not entries:
        raise SystemExit("no --after jobs")
    return HEADLINES[entries.pop()], sorted(rows, key=lambda r: r.seed)


def table(head: Headline, rows: Sequence[SeedRow]) -> str:
    lines = [f"| seed | steps | before ({head.label}) | after | gain | best constant ({head.constant_label}) | "
             "after beats constant | notes |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.seed} | {r.steps} | {r.before:.3f} | {r.after:.3f} | {r.gain:+.3f} | {r.constant:.3f} | "
                     f"{'yes' if r.beats_constant else 'no'} | {r.extra} |")
    v = verdict(rows)
    lines += ["", f"mean gain {v.mean_gain:+.3f}, spread {v.spread:.3f}: mean > 2 x spread over >= 3 seeds "
              f"{'met' if v.gain_met else 'NOT met'}; every seed beats the best constant: "
              f"{'yes' if v.beats_constant else 'NO'}; criterion {'MET' if v.met else 'NOT met'}"]
    return "\n".join(lines)


def _temperature(job: Path) -> float:
    """The rollouts' sampling temperature (``algorithm.temperature``; the schema's default is 1.0)."""
    return float(_json(job / "plan.json")["recipe"].get("algorithm", {}).get("temperature", 1.0))


def sampled_windows(job: Path, window: int) -> tuple[float, float]:
    """Mean training ``correctness`` reward over the first and the last ``window`` steps (``metrics.jsonl``)."""
    series: dict[int, float] = {}
    for line in (job / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line) if line.strip() else {}
        if "rewards/correctness/mean" in record:
            series[int(record["step"])] = float(record["rewards/correctness/mean"])
    values = [series[s] for s in sorted(series)]
    if len(values) < 2 * window:
        raise SystemExit(f"{job}: {len(values)} steps, fewer than two windows of {window}")
    return statistics.mean(values[:window]), statistics.mean(values[-window:])


def warm_start_rows(jobs: Sequence[Path], constant: Callable[[str, Path, dict[str, Any]], tuple[float, str]]
                    = constant_score, window: int = 10) -> dict[str, list[SeedRow]]:
    """Three row sets for jobs with a warm start: ``job`` (init -> after GRPO), ``grpo`` (warm start -> after,
    greedy held-out accuracy), ``grpo_sampled`` (training correctness reward, first -> last ``window`` steps:
    10 is ``result.json``'s own first10/last10; with 16 prompts a step, 10 steps draw 160 of the 512 training
    problems, and which ones are drawn moves the mean as much as learning does, so longer windows read
    ``metrics.jsonl``)."""
    out: dict[str, list[SeedRow]] = {"job": [], "grpo": [], "grpo_sampled": []}
    for job in jobs:
        entry, seed, result = job_facts(job)
        warm = result.get("warm_start")
        if not warm:
            raise SystemExit(f"{job}: no warm start in result.json (use --before/--after)")
        value, _ = constant(entry, job, result)
        init, warmed, after = (float(warm["eval_before"]["accuracy"]), float(warm["eval_after"]["accuracy"]),
                               float(result["eval_accuracy"]))
        steps = int(result["steps"])
        note = f"warm start {warmed:.3f}"
        out["job"].append(SeedRow(seed, init, after, value, True, steps, note))
        out["grpo"].append(SeedRow(seed, warmed, after, value, True, steps, f"init {init:.3f}"))
        sampled = result["rewards"]["correctness"]
        first, last = ((float(sampled["first10"]), float(sampled["last10"])) if window == 10
                       else sampled_windows(job, window))
        out["grpo_sampled"].append(SeedRow(seed, first, last, value, True, steps,
                                           f"training rollouts, temperature {_temperature(job):g}"))
    return {k: sorted(v, key=lambda r: r.seed) for k, v in out.items()}


def heldout_breakdown(job: Path, first: int = 128) -> dict[str, tuple[int, float, float]]:
    """Greedy accuracy after the warm start (the job's 2nd evaluation) and at the end (its last), on subsets of
    the held-out problems: ``all``; ``first<n>``, the first ``n`` (a generated set's first ``n`` problems are
    exactly the ``n``-problem set of the same seed, so a larger ``data.val_size`` still reports the old one);
    ``unseen``, the problems whose text is not among the job's training problems (generated one-digit
    problems repeat: the same source and seed regenerate the training rows here). name -> (n, warm, final)."""
    from gputrain.recipe.schema import DataSpec
    from gputrain.train.math_rl.data import load_math_rows

    recipe = _json(job / "plan.json")["recipe"]
    train, _ = load_math_rows(DataSpec.model_validate(recipe["data"]), seed=int(recipe["train"]["seed"]),
                              eval_size=int(recipe["algorithm"].get("eval_samples", 64)),
                              answer_format=str(recipe["algorithm"].get("answer_format", "auto")))
    seen = {r["problem"] for r in train}
    rows = [json.loads(line) for line in (job / "eval_samples.jsonl").read_text().splitlines() if line.strip()]
    last = max(r["eval"] for r in rows)
    by_eval = {e: [r for r in rows if r["eval"] == e] for e in (2, last)}
    subsets: dict[str, Callable[[int, dict[str, Any]], bool]] = {
        "all": lambda i, r: True,
        f"first{first}": lambda i, r: i < first,
        "unseen": lambda i, r: r["problem"] not in seen,
    }
    out: dict[str, tuple[int, float, float]] = {}
    for name, keep in subsets.items():
        warm = [bool(r["correct"]) for i, r in enumerate(by_eval[2]) if keep(i, r)]
        final = [bool(r["correct"]) for i, r in enumerate(by_eval[last]) if keep(i, r)]
        out[name] = (len(warm), sum(warm) / max(1, len(warm)), sum(final) / max(1, len(final)))
    return out


def breakdown_table(jobs: Sequence[Path]) -> str:
    """One line per seed: warm start -> final on every subset of :func:`heldout_breakdown`."""
    lines = ["| seed | subset | problems | after warm start | after RL | gain |", "|---|---|---|---|---|---|"]
    for job in sorted(jobs, key=lambda j: job_facts(j)[1]):
        for name, (n, warm, final) in heldout_breakdown(job).items():
            lines.append(f"| {job_facts(job)[1]} | {name} | {n} | {warm:.3f} | {final:.3f} | {final - warm:+.3f} |")
    return "\n".join(lines)


_WORK = re.compile(r"\s*(\d+)\s*([-+*])\s*(\d+)\s*=\s*(\d+)")


def worked_step(job: Path) -> list[tuple[int, float, float, float]]:
    """Per evaluation after the first (warm start, then each later one): (eval index, accuracy, share of
    completions whose worked step ``a op b = c`` copies the question's two operands, share whose ``c`` is
    ``a op b``). Why: the warm start teaches the worked solution; an RL phase paid only for the final answer
    may unlearn it while the answer gets better or worse (#29 round 5)."""
    rows = [json.loads(line) for line in (job / "eval_samples.jsonl").read_text().splitlines() if line.strip()]
    out = []
    for e in sorted({int(r["eval"]) for r in rows} - {1}):
        batch = [r for r in rows if r["eval"] == e]
        copied = consistent = 0
        for r in batch:
            if (m := _WORK.match(r.get("completion") or "")) is None:
                continue
            a, op, b, c = int(m[1]), m[2], int(m[3]), int(m[4])
            copied += sorted(int(x) for x in re.findall(r"\d+", r["problem"])) == sorted((a, b))
            consistent += {"+": a + b, "-": a - b, "*": a * b}[op] == c
        n = max(1, len(batch))
        out.append((e, sum(bool(r["correct"]) for r in batch) / n, copied / n, consistent / n))
    return out


def worked_step_table(jobs: Sequence[Path]) -> str:
    lines = ["| seed | evaluations from the warm start on: accuracy / operands copied / worked step right |",
             "|---|---|"]
    for job in sorted(jobs, key=lambda j: job_facts(j)[1]):
        cells = " -> ".join(f"{a:.3f} / {c:.2f} / {w:.2f}" for _, a, c, w in worked_step(job))
        lines.append(f"| {job_facts(job)[1]} | {cells} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--before", nargs="+", type=Path, help="the 1-step lr 1e-12 jobs")
    parser.add_argument("--after", nargs="+", type=Path, help="the trained jobs")
    parser.add_argument("--warm-start", nargs="+", type=Path, help="trained jobs with a warm start (no --before)")
    parser.add_argument("--window", type=int, default=10, help="--warm-start: steps per sampled-correctness window")
    args = parser.parse_args(argv)
    if args.warm_start:
        labels = {"job": "init -> after GRPO (greedy held-out accuracy)",
                  "grpo": "what GRPO adds: warm start -> after GRPO (greedy held-out accuracy)",
                  "grpo_sampled": "what GRPO adds to its objective: sampled correctness of its rollouts (at the "
                                  f"profile's temperature), first {args.window} -> last {args.window} steps"}
        for key, rows in warm_start_rows(args.warm_start, window=args.window).items():
            print(f"### {labels[key]}\n")
            print(table(HEADLINES["grpo_math"], rows) + "\n")
        print("### warm start -> after RL on subsets of the held-out problems\n")
        print(breakdown_table(args.warm_start))
        print("\n### the worked step along the run (greedy held-out completions)\n")
        print(worked_step_table(args.warm_start))
        return 0
    if not args.before or not args.after:
        parser.error("give --before and --after, or --warm-start")
    head, rows = collect(args.before, args.after)
    print(table(head, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
