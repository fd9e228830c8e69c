"""Benchmark: summarizing a 1 GiB mixed training log vs ``grep -c loss`` over the same file.

    python benchmarks/logs_summarize.py [--size-mib 1024] [--dir /tmp/gputrain-logs-bench] [--repeat 3]

Goal (issue 4): summary time ≤ 3× ``grep -c loss`` time, peak RSS ≤ 150 MiB, and re-summarizing after an
append reads only the new bytes. The log mixes what real runs print: tqdm bars rewritten with carriage
returns, NCCL/INFO/warning noise with ``[rankN]:`` prefixes, our ``step N/M | loss ...`` lines, HF Trainer
dicts, verl lines, and a traceback. Peak RSS is measured by ``/usr/bin/time -v`` around a fresh process.
Both commands run with a warm page cache (each file is read once first). Results go to benchmarks/RESULTS.md
by hand, with the machine and date.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

NOISE = [
    "[rank{r}]:[W1121 10:00:{s:02d}.000000 ProcessGroupNCCL.cpp:4561] Warning: barrier() using device under "
    "current context. You can specify device_id in init_process_group() to mute this warning.",
    "n1:4242:4300 [{r}] NCCL INFO Channel {s:02d}/24 : 0[{r}] -> 1[1] via P2P/CUMEM/read",
    "2026-11-21 10:00:{s:02d},123 - INFO - dataloader worker {r} prefetched shard {s:05d} (512 samples)",
    "/usr/lib/python3/site-packages/torch/utils/checkpoint.py:{s}: UserWarning: torch.utils.checkpoint: "
    "the use_reentrant parameter should be passed explicitly.",
    "[rank{r}]: Generating train split: {s} examples [00:00, 1234.56 examples/s]",
]
TRACEBACK = (
    "[rank1]: Traceback (most recent call last):\n"
    '[rank1]:   File "/app/gputrain/train/gnn_coloring.py", line 210, in <module>\n'
    "[rank1]:     main()\n"
    "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
)


def make_log(path: Path, size: int, seed: int = 0, unique: int = 32 << 20) -> None:
    """Write ~``size`` bytes of mixed log, deterministic for a given seed: ``unique`` bytes of generated
    text, then that block repeated (generating 1 GiB line by line would take minutes of CPU)."""
    block_path = path.with_suffix(".block")
    _make_unique(block_path, min(size, unique), seed)
    data = block_path.read_bytes()
    block_path.unlink()
    with path.open("wb") as fh:
        written = 0
        while written < size:
            fh.write(data)
            written += len(data)


def _make_unique(path: Path, size: int, seed: int) -> None:
    rng = random.Random(seed)
    step, total = 0, 10_000_000
    with path.open("w", encoding="utf-8") as fh:
        written = 0
        while written < size:
            block: list[str] = []
            for _ in range(2000):
                r = rng.random()
                if r < 0.02:
                    step += 1
                    loss = 3.0 * 0.9999**step + rng.random() * 0.05
                    block.append(f"step {step}/{total} | loss {loss:.4f} | lr 3.000e-04 | tokens_per_s "
                                 f"{50000 + rng.randint(0, 2000)} | gpu_mem_gib 61.2000")
                elif r < 0.03:
                    block.append(f"{{'loss': {rng.random() + 1:.4f}, 'grad_norm': {rng.random():.3f}, "
                                 f"'learning_rate': 2e-05, 'epoch': {step / 1e5:.2f}}}")
                elif r < 0.035:
                    block.append(f"step:{step} - actor/pg_loss:{rng.random():.3f} - critic/score/mean:"
                                 f"{rng.random():.3f} - actor/entropy:0.9 - timing_s/step:31.2")
                elif r < 0.25:
                    bars = "\r".join(
                        f"{100 * (step + i) // total:3d}%|▍         | {step + i}/{total} "
                        f"[01:{i % 60:02d}<99:00:00,  {2 + rng.random():.2f}it/s]"
                        for i in range(40)
                    )
                    block.append(bars)
                elif r < 0.25002:
                    block.append(TRACEBACK.rstrip("\n"))
                else:
                    template = NOISE[rng.randrange(len(NOISE))]
                    block.append(template.format(r=rng.randrange(8), s=rng.randrange(60)))
            text = "\n".join(block) + "\n"
            fh.write(text)
            written += len(text.encode())


def timed(cmd: list[str], repeat: int) -> tuple[float, str]:
    times, out = [], ""
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def peak_rss_mib(cmd: list[str]) -> float:
    err = subprocess.run(["/usr/bin/time", "-v", *cmd], check=True, capture_output=True, text=True).stderr
    match = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
    return int(match.group(1)) / 1024 if match else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/gputrain-logs-bench"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--giant-line-mib", type=int, default=2048, help="size of the one-line file (0: skip)")
    args = ap.parse_args()
    job = args.dir / "bench_job_1_20261121_000000"
    job.mkdir(parents=True, exist_ok=True)
    log = job / "training_output.log"
    if not log.exists() or log.stat().st_size < args.size_mib << 20:
        t0 = time.perf_counter()
        make_log(log, args.size_mib << 20)
        print(f"generated {log.stat().st_size / 2**20:.0f} MiB in {time.perf_counter() - t0:.1f} s")
    subprocess.run(["cat", str(log)], check=True, stdout=subprocess.DEVNULL)  # warm the page cache

    grep_s, grep_out = timed(["grep", "-c", "loss", str(log)], args.repeat)
    summary_cmd = [sys.executable, "-c",
                   "import json, sys; from gputrain.logs.summarize import summarize; "
                   "s = summarize(sys.argv[1], write=False); "
                   "print(json.dumps({'done': s['steps']['done'], 'loss': s['metrics']['loss']['count'], "
                   "'cause': s['cause']}))", str(log)]
    sum_s, sum_out = timed(summary_cmd, args.repeat)
    rss = peak_rss_mib(summary_cmd)
    grep_rss = peak_rss_mib(["grep", "-c", "loss", str(log)])

    # Incremental: a first summary of the job folder, then append 8 MiB and summarize again.
    state = job / ".summary_state.json"
    state.unlink(missing_ok=True)
    job_cmd = [sys.executable, "-c", "import sys; from gputrain.logs.summarize import summarize; "
               "summarize(sys.argv[1])", str(job)]
    first_s, _ = timed(job_cmd, 1)
    extra = job / "extra.part"
    make_log(extra, 8 << 20, seed=1)
    with log.open("ab") as fh:
        fh.write(extra.read_bytes())
    again_s, _ = timed(job_cmd, 1)
    nothing_s, _ = timed(job_cmd, 1)
    with log.open("r+b") as fh:  # restore the benchmark file
        fh.truncate(log.stat().st_size - extra.stat().st_size)
    extra.unlink()
    state.unlink(missing_ok=True)

    giant = {}
    if args.giant_line_mib:
        one = args.dir / "one_line.log"
        with one.open("wb") as fh:
            fh.write(b"step 1/2 | loss 1.0\n")
            fh.truncate(args.giant_line_mib << 20)  # zeros, no newline: one 2 GiB line
        one_cmd = [sys.executable, "-c", "import sys; from gputrain.logs.summarize import summarize; "
                   "print(summarize(sys.argv[1], write=False)['steps'])", str(one)]
        giant = {"giant_line_mib": args.giant_line_mib, "giant_s": timed(one_cmd, 1)[0],
                 "giant_rss_mib": peak_rss_mib(one_cmd)}
        one.unlink()

    result = {
        "log_mib": round(log.stat().st_size / 2**20), "grep_c_loss_s": round(grep_s, 3),
        "grep_count": int(grep_out), "grep_rss_mib": round(grep_rss, 1),
        "summarize_s": round(sum_s, 3), "ratio": round(sum_s / grep_s, 2), "summarize_rss_mib": round(rss, 1),
        "summary": json.loads(sum_out), "job_first_summary_s": round(first_s, 3),
        "resummarize_after_8MiB_append_s": round(again_s, 3), "resummarize_no_change_s": round(nothing_s, 3),
        **{k: round(v, 3) if isinstance(v, float) else v for k, v in giant.items()},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
