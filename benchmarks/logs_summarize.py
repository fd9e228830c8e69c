"""Benchmark: summarizing a 256 MiB dense-metric log and a sparse one, against ``grep -ac loss`` on each.

    python benchmarks/logs_summarize.py [--size-mib 256] [--dir /tmp/gputrain-logs-bench] [--repeat 5]

Goals (logs issue): dense ≤ 10× and sparse ≤ 3× the time of ``grep -ac loss`` over the same file, peak RSS
≤ 150 MiB, and following a growing log costs O(new bytes) (a re-summary after an append reads only the
appended bytes; printed as ``append_*``).

- **dense**: every line carries metrics, in the shapes real runs print them: TRL GRPO dicts with string
  values after tqdm ``\\r`` bars (transformers 5), verl ``step:N - key:value`` lines with ~40 keys,
  Lightning tqdm bars with postfix metrics rewritten 12 times per line, nanoGPT/torchtitan ``step``
  lines, and 3 % lines of random bytes (binary noise, invalid UTF-8, NULs).
- **sparse**: one metric line (an HF dict) per ~500 lines of NCCL INFO / warning chatter, ``[rankN]:``
  prefixed, and a traceback near the end.

Times are medians of ``--repeat`` fresh processes (``python -c 'summarize(...)'``: interpreter start-up and
imports included, as a user pays them) with a warm page cache; RSS from ``/usr/bin/time -v``. Record the
printed JSON in benchmarks/RESULTS.md with the machine, the date and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _grpo_dict(rng: random.Random, step: int) -> str:
    keys = {
        "loss": rng.uniform(-0.05, 0.05), "grad_norm": rng.uniform(0.1, 2), "learning_rate": 1e-6 * (1 - step / 1e6),
        "num_tokens": 1000.0 * step, "completions/mean_length": rng.uniform(50, 500),
        "completions/min_length": 12.0, "completions/max_length": 512.0, "completions/clipped_ratio": rng.random(),
        "completions/mean_terminated_length": rng.uniform(50, 400), "rewards/correctness/mean": rng.random(),
        "rewards/correctness/std": rng.random() / 2, "rewards/format/mean": rng.random(),
        "rewards/format/std": rng.random() / 2, "reward": rng.uniform(0, 2), "reward_std": rng.random(),
        "frac_reward_zero_std": rng.random(), "kl": rng.random() / 100, "entropy": rng.uniform(0.5, 2),
        "clip_ratio/low_mean": 0.0, "clip_ratio/high_mean": 0.0, "clip_ratio/region_mean": 0.0,
        "step_time": rng.uniform(10, 40), "epoch": step / 5000,
    }
    return "{" + ", ".join(f"'{k}': '{v:.4g}'" for k, v in keys.items()) + "}"


def _verl_line(rng: random.Random, step: int) -> str:
    names = [f"actor/{n}" for n in ("pg_loss", "entropy", "pg_clipfrac", "ppo_kl", "grad_norm", "lr")]
    names += [f"critic/{n}/{m}" for n in ("score", "rewards", "advantages", "returns") for m in ("mean", "max", "min")]
    names += [f"response_length/{m}" for m in ("mean", "max", "min", "clip_ratio")]
    names += [f"timing_s/{n}" for n in ("gen", "old_log_prob", "ref", "adv", "update_actor", "step", "testing")]
    names += [f"perf/{n}" for n in ("total_num_tokens", "time_per_step", "throughput", "max_memory_allocated_gb")]
    names += ["training/global_step", "training/epoch", "val-core/openai/gsm8k/reward/mean@1"]
    parts = [f"step:{step}"] + [f"{n}:{rng.uniform(-1, 100):.6g}" for n in names]
    return "(TaskRunner pid=41217) " + " - ".join(parts)


def _lightning_bar(rng: random.Random, epoch: int, start: int) -> str:
    total = 500
    bars = []
    for i in range(start, start + 12):
        n = i % total
        pct = 100 * n // total
        bars.append(f"Epoch {epoch}:  {pct:3d}%|{'█' * (pct // 10):<10}| {n}/{total} [00:{n % 60:02d}<00:30, "
                    f"{rng.uniform(10, 50):.2f}it/s, v_num=3, train_loss={rng.uniform(0.1, 3):.3f}, "
                    f"train_acc={rng.random():.3f}]")
    return "\r".join(bars)


def _dense_block(rng: random.Random, state: dict[str, int]) -> bytes:
    out: list[bytes] = []
    for _ in range(1000):
        r = rng.random()
        state["step"] += 1
        step = state["step"]
        if r < 0.35:
            pct = step * 100 // 1_000_000
            line = (f"\r {pct:3d}%|▍         | {step}/1000000 [1:02:{step % 60:02d}<99:00:00, "
                    f"{rng.uniform(0.02, 0.05):.2f}s/it]\r{' ' * 46}\r" + _grpo_dict(rng, step))
        elif r < 0.55:
            line = _verl_line(rng, step)
        elif r < 0.80:
            line = _lightning_bar(rng, step // 500, step)
        elif r < 0.88:
            line = (f"iter {step}: loss {rng.uniform(1, 4):.4f}, time {rng.uniform(90, 150):.2f}ms, "
                    f"mfu {rng.uniform(20, 40):.2f}%")
        elif r < 0.97:
            line = (f"[titan] 2026-11-21 10:00:00,000 - root - INFO - \x1b[31mstep: {step:5d}  \x1b[32mloss: "
                    f"{rng.uniform(1, 9):7.4f}  \x1b[33mgrad_norm: {rng.random():7.4f}  \x1b[34mmemory: 31.20GiB"
                    f"(39.42%)  \x1b[34mtps: {rng.randint(1000, 9000):,}  \x1b[36mtflops: 123.45  \x1b[35mmfu: "
                    f"12.48%\x1b[39m")
        else:  # binary noise: random bytes, invalid UTF-8, NULs, stray \r and \n
            out.append(bytes(rng.randrange(256) for _ in range(rng.randint(40, 300))))
            continue
        out.append(line.encode())
    return b"\n".join(out) + b"\n"


NCCL = [
    "[rank{r}]:n1:4242:4300 [{r}] NCCL INFO Channel {s:02d}/24 : 0[{r}] -> 1[1] via P2P/CUMEM/read",
    "[rank{r}]:n1:4242:4300 [{r}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
    "[rank{r}]:n1:4242:4318 [{r}] NCCL INFO comm 0x5581e2 rank {r} nRanks 8 nNodes 1 localRanks 8 "
    "localRank {r} MNNVL 0",
    "[rank{r}]:[W1121 10:00:{s:02d}.000000 ProcessGroupNCCL.cpp:4561] Warning: barrier() using device under current "
    "context. You can specify device_id in init_process_group() to mute this warning.",
    "[rank{r}]:n1:4242:4300 [{r}] NCCL INFO ncclCommInitRank comm 0x5581e2 rank {r} nranks 8 cudaDev {r} nvmlDev {r} "
    "busId {s}000 commId 0x9c4e - Init COMPLETE",
]


def _sparse_block(rng: random.Random, state: dict[str, int]) -> bytes:
    out = []
    for _ in range(1000):
        if rng.random() < 1 / 500:
            state["step"] += 1
            out.append("[rank0]:" + _grpo_dict(rng, state["step"]))
        else:
            out.append(NCCL[rng.randrange(len(NCCL))].format(r=rng.randrange(8), s=rng.randrange(60)))
    return ("\n".join(out) + "\n").encode()


def make_log(path: Path, size: int, kind: str, seed: int = 0) -> None:
    """About ``size`` bytes of log, deterministic for a seed (about 30 s for 256 MiB dense)."""
    rng = random.Random(seed)
    state = {"step": 0}
    make = _dense_block if kind == "dense" else _sparse_block
    with path.open("wb") as fh:
        written = 0
        while written < size:
            data = make(rng, state)
            fh.write(data)
            written += len(data)
        if kind == "sparse":
            fh.write(b"[rank1]:Traceback (most recent call last):\n[rank1]:  File \"train.py\", line 9, in <module>\n"
                     b"[rank1]:RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error\n")


def timed(cmd: list[str], repeat: int) -> tuple[float, list[float], str]:
    times, out = [], ""
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, out


def peak_rss_mib(cmd: list[str]) -> float:
    err = subprocess.run(["/usr/bin/time", "-v", *cmd], check=True, capture_output=True, text=True).stderr
    match = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
    return int(match.group(1)) / 1024 if match else float("nan")


SUMMARY = (
    "import json, sys; from gputrain.logs.summarize import summarize; s = summarize(sys.argv[1], write=False); "
    "print(json.dumps({'done': s['steps']['done'], 'metrics': len(s['metrics']), 'cause': s['cause']}))"
)


def bench(kind: str, log: Path, repeat: int) -> dict[str, object]:
    subprocess.run(["cat", str(log)], check=True, stdout=subprocess.DEVNULL)  # warm the page cache
    grep_s, grep_all, grep_out = timed(["grep", "-ac", "loss", str(log)], repeat)
    cmd = [sys.executable, "-c", SUMMARY, str(log)]
    sum_s, sum_all, sum_out = timed(cmd, repeat)
    # Follow mode: a 64 MiB log scanned once (state saved as JSON, as summaries do), 1 MiB appended, the
    # state reloaded and the log scanned again: the second pass must read only the new MiB.
    target = log.parent / f"follow_{kind}.log"
    with log.open("rb") as src:
        target.write_bytes(src.read(64 << 20))
        extra = src.read(1 << 20)
    code = (
        "import json, sys, time; from gputrain.logs.scan import LogScanner\n"
        "t = time.perf_counter(); s = LogScanner(sys.argv[1]); first = s.scan(); t1 = time.perf_counter()\n"
        "state = json.dumps(s.to_json())\n"
        "open(sys.argv[1], 'ab').write(open(sys.argv[2], 'rb').read())\n"
        "t2 = time.perf_counter(); s = LogScanner.from_json(json.loads(state)); again = s.scan()\n"
        "print(json.dumps([first, t1 - t, again, time.perf_counter() - t2]))\n"
    )
    extra_path = log.parent / "extra.part"
    extra_path.write_bytes(extra)
    first, first_s, again, again_s = json.loads(subprocess.run(
        [sys.executable, "-c", code, str(target), str(extra_path)], check=True, capture_output=True, text=True
    ).stdout)
    target.unlink()
    extra_path.unlink()
    return {
        "kind": kind,
        "log_mib": round(log.stat().st_size / 2**20),
        "grep_ac_loss_s": round(grep_s, 3),
        "grep_runs_s": [round(t, 3) for t in grep_all],
        "summarize_s": round(sum_s, 3),
        "summarize_runs_s": [round(t, 3) for t in sum_all],
        "ratio": round(sum_s / grep_s, 2),
        "summarize_rss_mib": round(peak_rss_mib(cmd), 1),
        "summary": json.loads(sum_out),
        "grep_count": int(grep_out),
        "follow_first_pass": {"bytes_read": first, "s": round(first_s, 3)},
        "follow_after_1MiB_append": {"bytes_read": again, "s": round(again_s, 3)},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/gputrain-logs-bench"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", choices=("dense", "sparse"))
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    results = []
    for kind in ("dense", "sparse"):
        if args.only and kind != args.only:
            continue
        log = args.dir / f"{kind}_{args.size_mib}MiB.log"
        if not log.exists() or log.stat().st_size < args.size_mib << 20:
            t0 = time.perf_counter()
            make_log(log, args.size_mib << 20, kind)
            print(f"generated {log} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        results.append(bench(kind, log, args.repeat))
    print(json.dumps({"load_avg_1m": os.getloadavg()[0], "results": results}, indent=2))


if __name__ == "__main__":
    main()
