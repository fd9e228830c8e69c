"""``python -m gputrain.backends.slurm_port JOBID``: a free TCP port for torchrun's rendezvous on this node.

Run by the job script on the head node (where the batch script runs). The search starts at a port derived
from the job id, so two jobs on one node rarely try the same one first, and stays below the kernel's
ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``), where outgoing connections take their ports
and could take the rendezvous port between this check and torchrun's bind. Standard library only.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

LOW = 20000
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_start(default: int = 32768) -> int:
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


def is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def free_port(job_id: int, low: int = LOW, high: int | None = None) -> int | None:
    """The first free port in ``[low, high)`` (high: the ephemeral range's start), from ``low + job_id % span``."""
    high = ephemeral_start() if high is None else high
    if high <= low:
        low, high = 1024, high
    span = high - low
    first = job_id % span
    for offset in range(span):
        port = low + (first + offset) % span
        if is_free(port):
            return port
    return None


def main(argv: list[str]) -> int:
    job_id = int(argv[0]) if argv and argv[0].isdigit() else 0
    port = free_port(job_id)
    if port is None:
        return 1
    print(port)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
