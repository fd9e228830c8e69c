"""``python -m gputrain.train.gnn_coloring --plan JOB/plan.json --job-dir JOB`` (usually under torchrun)."""

from gputrain.train.gnn_coloring.train import train
from gputrain.train.runtime import run_entrypoint

if __name__ == "__main__":
    run_entrypoint(train)
