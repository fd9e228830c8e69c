"""How many shapes the diffusion loss's head rows take over 200 training draws: exact gather vs buckets (#27).

    PYTHONPATH=. python benchmarks/diffusion_head_rows.py

Every distinct row count is a new size for the ``rows × V`` logits, their fp32 copy and their gradients,
which the CUDA caching allocator cannot serve from a freed block of another size (fragmentation), and a new
shape for a compiler. Draws t and the masks exactly as training does (antithetic block times, the
algorithm's default t range); no model is run. Prints one JSON line per shape (the benchmark's and the preset's).
"""

from __future__ import annotations

import json

import torch

from gputrain.recipe.algorithms.diffusion import DiffusionAlgorithm
from gputrain.train.diffusion.head_rows import bucketed_rows, row_quantum
from gputrain.train.diffusion.objective import Layout, draw_masks, draw_times
from gputrain.train.diffusion.schedule import LogLinearSchedule


def main() -> None:
    algo = DiffusionAlgorithm()
    cpu = torch.device("cpu")
    for batch, seq in ((32, 1024), (128, 512)):  # bench_default; the H200 preset's micro-batch
        layout = Layout.bd3(seq, 16)
        slots = layout.training_inputs(cpu)["cond_idx"][:seq]
        g = torch.Generator().manual_seed(0)
        exact, buckets, extra = set(), set(), []
        for _ in range(200):
            t = draw_times(batch, layout, algo.clip_beta, algo.clip_omega, algo.antithetic, cpu, generator=g)
            idx, count = bucketed_rows(draw_masks(t[:, slots], slots, LogLinearSchedule(), None, g))
            exact.add(count)
            buckets.add(len(idx))
            extra.append(len(idx) / count - 1)
        print(json.dumps({"batch": batch, "seq_len": seq, "t_range": [algo.clip_beta, algo.clip_omega],
                          "draws": 200, "distinct_row_counts_exact": len(exact),
                          "distinct_row_counts_bucketed": len(buckets), "bucket_sizes": sorted(buckets),
                          "quantum": row_quantum(batch * seq), "padding_rows_mean": round(sum(extra) / 200, 4),
                          "padding_rows_max": round(max(extra), 4)}))


if __name__ == "__main__":
    main()
