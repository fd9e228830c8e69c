"""gputrain: one YAML recipe → the exact scripts that train it on Slurm, this machine or a RunPod pod."""

__version__ = "0.1.0"
