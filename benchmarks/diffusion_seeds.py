"""Before/after per seed for BD3-LM and HDP runs of the ``cpu`` profile, scored by one evaluator (issue 29).

Run the README command once per seed, then score every finished job the same way::

    for s in 0 1 2; do gputrain run recipes/bd3lm_gsm8k.yaml --gpu cpu --gpus 2 --set train.seed=$s \\
        --logs-dir runs/seed$s; done
    PYTHONPATH=. python benchmarks/diffusion_seeds.py runs/seed*/bd3lm_gsm8k_job_*

HDP jobs (``recipes/hdp_diffusion.yaml``) the same way: their rows are encoded as the HDP trainer encodes them
(question, plan and execution segments of the job's lengths; the question is never noised nor scored).

``after``: the job's exported model (``<job>/model``, the EMA weights its ``result.json`` scored) loaded with
``gputrain.train.diffusion.export.load_pretrained``. ``before``: the same architecture at initialisation
(seeded by the run's seed; the zero-initialised head makes it uniform over the 257 non-mask bytes, so every
seed starts at the same figure). Both scored on one fixed held-out set (256 generated problems from a seed no
run trains on) with the same t and mask draws: the val NELBO per real token, t over [0.001, 1]. Prints one
markdown row per seed and the criteria of issue 29: mean gain more than twice the spread (max − min) of the
gains between seeds, and every model below the best constant answer — for a NELBO, the best context-free
predictor: the eval rows' own byte frequencies at every masked position (scored by the same evaluator).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from gputrain.train.diffusion.data import ByteTokenizer, Segment, encode_fixed, generate_problems
from gputrain.train.diffusion.evaluation import heldout_nelbo
from gputrain.train.diffusion.export import load_pretrained
from gputrain.train.diffusion.hierarchy import encode_hdp
from gputrain.train.diffusion.model import DiT

EVAL_SEED, EVAL_ROWS, BATCH, BATCHES = 424242, 256, 16, 16


def unigram(val: Any, eos_id: int, vocab: int, layout: Any) -> Any:
    """The best context-free predictor: the eval rows' own byte frequencies (real tokens) at every position."""
    import torch

    from gputrain.train.diffusion.objective import real_tokens

    real = real_tokens(val, layout, eos_id)
    counts = torch.bincount(val[:, layout.noisy_pos][real], minlength=vocab).double() + 1e-9
    log_p = (counts / counts.sum()).log().float()

    class Unigram(torch.nn.Module):
        def forward(self, tokens: Any, *args: Any, head_len: int | None = None, head_rows: Any = None,
                    **kwargs: Any) -> tuple[Any, list[Any]]:
            if head_rows is None:
                rows = tokens.shape[0] * (head_len or 1)
            else:  # a mask of the scored positions, or their flat indices (bucketed rows)
                rows = int(head_rows.sum()) if head_rows.dtype == torch.bool else head_rows.numel()
            return log_p.expand(rows, vocab).clone(), []

    return Unigram()


def score(job: Path) -> dict[str, float]:
    import torch

    pre = load_pretrained(job / "model")
    result = json.loads((job / "result.json").read_text())
    recipe = json.loads((job / "plan.json").read_text())["recipe"]
    seed = int(recipe["train"]["seed"])
    tok, n = ByteTokenizer(), pre.layout.seq_len
    rows = generate_problems(EVAL_ROWS, EVAL_SEED)
    if recipe["entrypoint"] == "hdp":
        algo = recipe["algorithm"]
        q, p, e = int(algo["question_len"]), int(algo["plan_len"]), int(algo["exec_len"])
        val = torch.tensor([encode_hdp(tok, r, q, p, e) for r in rows])
    else:
        val = torch.tensor([encode_fixed(tok, [Segment(f"Question: {r['question']}\nAnswer: {r['answer']}", n)])
                            for r in rows])
    torch.manual_seed(seed)
    init = DiT(pre.model.cfg).eval()
    scorer = pre.scorer()
    before = heldout_nelbo(scorer, init, val, BATCH, BATCHES, seed=0)["nelbo"]
    after = heldout_nelbo(scorer, pre.model, val, BATCH, BATCHES, seed=0)["nelbo"]
    const = unigram(val, pre.eos_id, pre.model.cfg.vocab_size, pre.layout)
    best_constant = heldout_nelbo(scorer, const, val, BATCH, BATCHES, seed=0)["nelbo"]
    return {"seed": seed, "before": before, "after": after, "gain": before - after, "steps": result["steps"],
            "unigram": best_constant,
            "run_val_nelbo": result["val_nelbo"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jobs", nargs="+", type=Path)
    args = parser.parse_args()
    rows = sorted((score(j) for j in args.jobs), key=lambda r: r["seed"])
    print("| seed | steps | before (init) | after (exported EMA model) | gain | best constant (unigram) | "
          "run's own val_nelbo |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['seed']} | {r['steps']} | {r['before']:.3f} | {r['after']:.3f} | {r['gain']:.3f} | "
              f"{r['unigram']:.3f} | {r['run_val_nelbo']:.3f} |")
    gains = [r["gain"] for r in rows]
    mean, spread = statistics.mean(gains), max(gains) - min(gains)
    met = len(gains) >= 3 and mean > 2 * spread
    below = all(r["after"] < r["unigram"] for r in rows)
    print(f"\nevery seed below the best constant (unigram) predictor: {'yes' if below else 'NO'}")
    print(f"\nmean gain {mean:.3f} nats, spread {spread:.3f}: criterion (mean > 2 x spread, 3 seeds) "
          f"{'met' if met else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
