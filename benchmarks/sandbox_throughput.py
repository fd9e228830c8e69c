"""Programs scored per second on the bundled MBPP sample, through the real reward path (issue #25's budget).

    python benchmarks/sandbox_throughput.py --rounds 6 --workers 2
    GPUTRAIN_SANDBOX_DISABLE=namespaces python benchmarks/sandbox_throughput.py   # the Landlock level (root)

Each round scores one batch: every task's gold program and a wrong one (its last line's ``return`` made to
return None), each made unique by a comment so that the reward's de-duplication does not skip it. The
first round is a warm-up (isolation probe, pool); the figure is the median of the others. Correctness is
checked as it goes: a gold program below 1.0 or a wrong one at 1.0 stops the benchmark.

Besides programs per second (wall clock, which a loaded machine distorts), it reports the CPU time spent
per program by the trainer and every sandbox process (``getrusage`` of this process and its waited-for
descendants; the benchmark is a child subreaper and reaps the sandboxes' orphaned zombies between rounds,
so their CPU is counted too): the figure to compare when the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time

from gputrain.train.code_reward import load_mbpp, score_completions_detailed
from gputrain.train.code_reward.reward import get_pool
from gputrain.train.sandbox import SandboxLimits


def batch(tasks: list, round_no: int) -> tuple[list[str], list, list[float]]:
    completions, batch_tasks, expected = [], [], []
    for i, task in enumerate(tasks):
        gold = task["reference"] + f"\n# round {round_no} item {i}\n"
        wrong = "def _unused():\n    pass\n" + gold.replace("return ", "return None and ", 1)
        completions += [f"```python\n{gold}\n```", f"```python\n{wrong}\n```"]
        batch_tasks += [task, task]
        expected += [1.0, 0.0]
    return completions, batch_tasks, expected


def _cpu() -> float:
    while True:  # orphans re-parented to us (killed sandboxes): reap them so their CPU time counts
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    import ctypes

    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    tasks = load_mbpp()
    limits = SandboxLimits()
    level = get_pool(args.workers, limits).level
    rates, cpu = [], []
    for r in range(args.rounds + 1):
        completions, batch_tasks, expected = batch(tasks, r)
        cpu_before = _cpu()
        started = time.perf_counter()
        scores = score_completions_detailed(completions, batch_tasks, workers=args.workers, limits=limits)
        seconds = time.perf_counter() - started
        bad = [(s.program[:60], s.reward, [o.reason for o in s.outcomes])
               for s, e in zip(scores, expected, strict=True) if (s.reward != 1.0 if e else s.reward == 1.0)]
        if bad:
            raise SystemExit(f"wrong scores: {bad[:3]}")
        if r:
            rates.append(len(completions) / seconds)
            cpu.append((_cpu() - cpu_before) / len(completions))
    print(json.dumps({
        "level": level, "uid": os.getuid(), "workers": args.workers, "programs_per_round": 2 * len(tasks),
        "rounds": args.rounds, "programs_per_s_median": round(statistics.median(rates), 2),
        "min": round(min(rates), 2), "max": round(max(rates), 2), "load": round(os.getloadavg()[0], 2),
        "cpu_ms_per_program_median": round(1000 * statistics.median(cpu), 1),
    }))


if __name__ == "__main__":
    main()
