#!/usr/bin/env bash
# Whole-process start-up of `gputrain plan` (2 nodes x 2 GPUs) against torchx's dry-run of the same shape.
# Goal (core issue): gputrain's median <= 0.5x torchx's. Needs hyperfine (apt-get install hyperfine) and
# torchx (pip install torchx). Usage: benchmarks/plan_startup.sh [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
printf 'print("hello")\n' > "$scratch/train.py"
hyperfine --warmup 3 --runs "$runs" --export-markdown "$scratch/plan.md" \
    -n gputrain "gputrain plan recipes/grpo_math_fsdp.yaml --gpu H100 --gpus 2 --nodes 2" \
    -n torchx "torchx run --dryrun -s slurm dist.ddp -j 2x2 --script $scratch/train.py"
cat "$scratch/plan.md"
