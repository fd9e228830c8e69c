"""BD3-LM on the CPU before and after training it as the reference does (issue 17): one table.

    PYTHONPATH=. python benchmarks/diffusion_reference.py --steps 600 --seeds 0 1 2 [--ablations]

Trains the ``cpu`` profile's model (2 layers × 64, bytes, sequence 256 so every answer fits, block 4) in
one process per run, with the same seed, data and steps, under three settings:

* ``before``: this trainer's old choices, each a switch now — t fed to the network, padding scored, no
  EMA, no dropout, AdamW β2 0.98, no mask resampling, old clip windows (widths 0.5/0.7/0.9/1, stride 0.1),
  4 fixed steps per block, no nucleus.
* ``after``: the defaults (the reference's choices), EMA 0.99 as in the ``cpu`` profile.
* ``after + t``: the defaults with ``time_conditioning: true``, to show what the t input alone does.

Every final model is then scored by one evaluator (``gputrain.train.diffusion.evaluation``) on the same
held-out rows and random numbers, with the weights its run evaluates (raw before, EMA after): NELBO per
real token over t in [0.001, 1] (the bound), in the t < 0.1 and t > 0.5 bins, and per position with
padding (the old figure). The clip search is repeated with 6 seeds on the ``after`` model, once as the
old trainer did it (per-sequence variance, fresh global-RNG noise per window, no resampling) and once as
now; the table counts the distinct windows picked. Prints Markdown; ``--json`` writes the raw numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from gputrain.planner import make_plan
from gputrain.recipe.algorithms.diffusion import DiffusionAlgorithm
from gputrain.recipe.schema import ModelSpec
from gputrain.train.bd3lm import bd3lm_task
from gputrain.train.diffusion.clip_search import clip_candidates
from gputrain.train.diffusion.data import ByteTokenizer, generate_problems
from gputrain.train.diffusion.evaluation import Scorer, clip_window, heldout_nelbo
from gputrain.train.diffusion.model import DiT, DiTConfig
from gputrain.train.diffusion.objective import Layout, draw_times, nelbo_per_token
from gputrain.train.diffusion.schedule import LogLinearSchedule

REPO = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")
BEFORE: dict[str, Any] = {
    "time_conditioning": True, "loss_on_padding": True, "ema": 0.0, "dropout": 0.0, "adam_betas": [0.9, 0.98],
    "clip_resample": False, "clip_search_widths": [0.5, 0.7, 0.9, 1.0], "clip_search_delta": 0.1,
    "first_hitting": False, "sampling_steps": 4, "nucleus_p": 1.0}
SETTINGS: dict[str, dict[str, Any]] = {"before": BEFORE, "after": {}, "after + t": {"time_conditioning": True}}
#: ``--ablations``: the defaults with one switch set back to the old choice.
ABLATIONS: dict[str, dict[str, Any]] = {"after, dropout 0": {"dropout": 0.0}, "after, no EMA": {"ema": 0.0},
             "after, β2 0.98": {"adam_betas": [0.9, 0.98]}, "after, padding scored": {"loss_on_padding": True},
             "after, no resampling": {"clip_resample": False}}


def config(seed: int, steps: int, algorithm: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "bd3lm-compare", "entrypoint": "bd3lm",
        "model": {"name": "dit", "hidden_size": 64, "num_layers": 2, "num_heads": 4, "seq_len": 256},
        "data": {"source": "generated", "train_size": 2048, "val_size": 128},
        "train": {"batch_size": 16, "max_steps": steps, "learning_rate": 3e-3, "lr_schedule": "constant",
                  "warmup_steps": 5, "precision": "fp32", "seed": seed, "log_every": 100, "grad_clip": 1.0,
                  "eval_every": 100, "save_every": steps},
        "algorithm": {"block_size": 4, "tokenizer": "bytes", "cond_dim": 32, "eval_batches": 2, "num_samples": 32,
                      "clip_search_batches": 1, "ema": 0.99, **algorithm},
    }


def train(job: Path, cfg: dict[str, Any]) -> float:
    job.mkdir(parents=True)
    (job / "recipe.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    plan = make_plan(job / "recipe.yaml", gpu="cpu", gpus_per_node=1)  # the planner writes what a run gets
    (job / "plan.json").write_text(plan.to_json())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    tic = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gputrain.train.bd3lm", "--plan", str(job / "plan.json"),
                           "--job-dir", str(job)], env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        raise SystemExit(f"training failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return time.perf_counter() - tic


def load(job: Path, cfg: dict[str, Any], algo: DiffusionAlgorithm) -> DiT:
    state = torch.load(next((job / "checkpoints").glob("step_*")) / "state.pt", weights_only=False)["state"]
    weights = state["model"] if "ema" not in state else \
        {k.removeprefix("module."): v for k, v in state["ema"].items() if k.startswith("module.")}
    m = cfg["model"]
    net = DiT(DiTConfig(vocab_size=ByteTokenizer.vocab_size, hidden_size=m["hidden_size"], num_layers=m["num_layers"],
                        num_heads=m["num_heads"], cond_dim=algo.cond_dim, time_conditioning=algo.time_conditioning))
    net.load_state_dict(weights)
    return net.eval()


def old_clip_search(net: DiT, layout: Layout, val_x: torch.Tensor, global_seed: int) -> tuple[float, float]:
    """The old trainer's search: per-sequence variance, noise from the global RNG, old windows."""
    sched, inputs, tok = LogLinearSchedule(), layout.training_inputs(CPU), ByteTokenizer()
    torch.manual_seed(global_seed)
    gen = torch.Generator().manual_seed(17)
    best, best_var = (0.0, 1.0), float("inf")
    with torch.no_grad():
        for lo, hi in clip_candidates([0.5, 0.7, 0.9, 1.0], 0.1):
            x0 = val_x[torch.randint(len(val_x), (16,), generator=gen)]
            t = draw_times(16, layout, lo, hi, True, CPU)
            est = nelbo_per_token(net, x0, t, layout, sched, tok.mask_id, inputs).mean(dim=1).double()
            var = float(est.var(unbiased=False))
            if var < best_var:
                best, best_var = (lo, hi), var
    return best


def idle_steps(net: DiT, layout: Layout, algo: DiffusionAlgorithm) -> tuple[float, float]:
    """(network calls per block, share of denoising steps that revealed no token) of the run's sampler."""
    from gputrain.train.diffusion.sampler import sample

    tok, seen = ByteTokenizer(), []

    class Spy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cfg = net.cfg

        def forward(self, x: torch.Tensor, pos: torch.Tensor, *args: Any, **kw: Any) -> Any:
            seen.append((int(pos[0]), int((x == tok.mask_id).sum())))
            return net(x, pos, *args, **kw)

    sample(Spy(), layout, LogLinearSchedule(), tok.mask_id, 1, algo.sampling_steps, CPU,
           generator=torch.Generator().manual_seed(0), first_hitting=algo.first_hitting, nucleus_p=algo.nucleus_p)
    calls = [(p, m) for p, m in seen if m]
    idle = sum(1 for (p0, m0), (p1, m1) in zip(calls, [*calls[1:], (-1, 0)], strict=True) if p0 == p1 and m0 == m1)
    return len(calls) / layout.num_noisy_blocks, idle / len(calls)


def evaluate(job: Path, cfg: dict[str, Any], stability: bool) -> dict[str, Any]:
    algo = DiffusionAlgorithm.model_validate(cfg["algorithm"])
    task, tok = bd3lm_task(algo, ModelSpec.model_validate(cfg["model"])), ByteTokenizer()
    val_x = torch.tensor([task.encode(tok, r) for r in generate_problems(512, 99)])  # rows no run trained on
    net = load(job, cfg, algo)
    scorer = Scorer(task.layout, LogLinearSchedule(algo.noise_eps), tok.mask_id, tok.eos_id,
                    task.layout.training_inputs(CPU))
    out: dict[str, Any] = {}
    for name, rng in (("nelbo", (0.0, 1.0)), ("nelbo_t_below_0.1", (0.0, 0.1)), ("nelbo_t_above_0.5", (0.5, 1.0))):
        got = heldout_nelbo(scorer, net, val_x, 32, 16, seed=1234, t_range=rng)
        out[name] = got["nelbo"]
        if name == "nelbo":
            out["nelbo_padded"] = got["nelbo_padded"]
    result = json.loads((job / "result.json").read_text())
    samples = [json.loads(line) for line in (job / "samples.jsonl").read_text().splitlines()]
    out |= {"clip": result["clip"], "sample_answer_accuracy": result["sample_answer_accuracy"],
            "samples_with_final_answer": sum(s["has_final_answer"] for s in samples) / len(samples)}
    out["calls_per_block"], out["idle_step_share"] = idle_steps(net, task.layout, algo)
    if stability:
        cands = clip_candidates(algo.clip_search_widths, algo.clip_search_delta)
        out["clip_new"] = [clip_window(scorer, net, val_x, 16, 1, cands, seed=s)[0] for s in range(6)]
        out["clip_old"] = [old_clip_search(net, task.layout, val_x, 100 + s) for s in range(6)]
    return out


def table(runs: dict[str, dict[int, dict[str, Any]]], steps: int) -> str:
    names, seeds = list(runs), sorted(next(iter(runs.values())))

    def cell(name: str, key: str, fmt: str = "{:.3f}") -> str:
        return " / ".join(fmt.format(runs[name][s][key]) for s in seeds)

    rows = [("val NELBO per real token, t in [0.001, 1] (bound)", "nelbo"),
            ("  same, t < 0.1", "nelbo_t_below_0.1"), ("  same, t > 0.5", "nelbo_t_above_0.5"),
            ("NELBO per position incl. padding (old figure)", "nelbo_padded"),
            ("network calls per 4-token block", "calls_per_block"),
            ("share of sampling steps that reveal nothing", "idle_step_share"),
            ("samples with a final answer", "samples_with_final_answer"),
            ("sample answer accuracy", "sample_answer_accuracy")]
    lines = [f"| {steps} steps, seeds {', '.join(map(str, seeds))} | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(names)]
    lines += [f"| {label} | " + " | ".join(cell(n, key) for n in names) + " |" for label, key in rows]
    lines.append("| final clip window [β, ω] | " + " | ".join(
        " / ".join("[{:g}, {:g}]".format(*runs[n][s]["clip"]) for s in seeds) for n in names) + " |")
    after = runs.get("after", {}).get(seeds[0], {})
    if "clip_new" in after:
        old, new = sorted(set(map(tuple, after["clip_old"]))), sorted(set(map(tuple, after["clip_new"])))
        lines.append("")
        lines.append(f"Clip search repeated with 6 seeds on the `after` model (seed {seeds[0]}): old method "
                     f"{len(old)} distinct windows {old}; reference method {len(new)} distinct {new}.")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--json", type=Path, help="write the raw numbers here")
    ap.add_argument("--ablations", action="store_true", help="also the defaults with one old switch each")
    ap.add_argument("--only", nargs="+", help="run only these settings (names as in the table)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    settings = SETTINGS | (ABLATIONS if args.ablations else {})
    if args.only:
        settings = {k: v for k, v in settings.items() if k in args.only}
    runs: dict[str, dict[int, dict[str, Any]]] = {name: {} for name in settings}
    with tempfile.TemporaryDirectory(prefix="bd3-compare-") as tmp:
        for seed in args.seeds:
            for name, algorithm in settings.items():
                cfg = config(seed, args.steps, algorithm)
                job = Path(tmp) / f"run{len(list(Path(tmp).iterdir()))}-{seed}"
                wall = train(job, cfg)
                runs[name][seed] = evaluate(job, cfg, stability=name == "after" and seed == args.seeds[0])
                runs[name][seed]["train_wall_s"] = wall
                print(f"{name} seed {seed}: {wall:.0f} s, val NELBO {runs[name][seed]['nelbo']:.3f}", file=sys.stderr)
    print(f"Machine: {platform.node()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{time.strftime('%Y-%m-%d')}")
    print(table(runs, args.steps))
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1, default=list) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
