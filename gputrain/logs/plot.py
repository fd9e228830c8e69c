"""``curves.png``: loss and reward curves, drawn only when matplotlib is installed (an optional extra)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gputrain.logs.stats import MetricTable


def write_curves(table: MetricTable, path: Path, limit: int = 4) -> bool:
    """Draw up to ``limit`` curves, losses first; False when there is nothing to draw or no matplotlib."""
    keys = [k for k in table.metrics if table.metrics[k].count > 1 and ("loss" in k or "reward" in k)]
    keys = sorted(keys, key=lambda k: (0 if "loss" in k else 1, k))[:limit]
    if not keys:
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(len(keys), 1, figsize=(7, 2.2 * len(keys)), squeeze=False, sharex=True)
    for ax, key in zip(axes[:, 0], keys, strict=True):
        points = table.metrics[key].series
        ax.plot([s for s, _ in points], [v for _, v in points], linewidth=1.2)
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("step")
    fig.tight_layout()
    fd, tmp = tempfile.mkstemp(prefix=".curves.", suffix=".png", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o644)
    try:
        fig.savefig(tmp, dpi=100)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True
