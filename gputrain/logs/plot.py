"""``curves.png``: one panel per kind of metric, on a shared step axis, titled with the job.

Panels (those with data): loss and eval loss; rewards (the total and each component: TRL's
``rewards/<fn>/mean``, verl's ``critic/score/mean``); completion length; learning rate; throughput; GPU
memory; the diffusion NELBO terms; GNN colouring conflicts. Drawn only when matplotlib is installed (an
optional extra); matplotlib is imported here, never at module level elsewhere.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gputrain.logs.catalog import metric_info
from gputrain.logs.stats import MetricTable

#: (panel title, group, keys to leave out)
PANELS = (
    ("loss", "loss", ()),
    ("reward", "reward", ("/std", "reward_std", "/max", "/min", "frac_reward_zero_std", "advantages")),
    ("completion length (tokens)", "completions", ("clipped", "terminated", "min_", "max_", "/min", "/max")),
    ("learning rate", "lr", ()),
    ("speed (throughput, step time)", "throughput", ("timing_s/", "runtime", "deepspeed/", "eval_")),
    ("GPU memory (GiB)", "memory", ()),
    ("NELBO terms", "nelbo", ()),
    ("conflicts", "conflicts", ()),
)
MAX_LINES = 6


def panel_keys(table: MetricTable) -> list[tuple[str, list[str]]]:
    """The panels to draw and the metric keys in each (curves need at least two points)."""
    out = []
    for title, group, skip in PANELS:
        keys = [k for k in table.metrics if metric_info(k).group == group and table.metrics[k].count > 1
                and not any(s in k for s in skip)]
        if keys:
            out.append((title, sorted(keys, key=lambda k: (k.count("/"), len(k), k))[:MAX_LINES]))
    return out


def write_curves(table: MetricTable, path: Path, title: str | None = None) -> bool:
    """Draw the panels into ``path`` atomically; False when there is nothing to draw or no matplotlib."""
    panels = panel_keys(table)
    if not panels:
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    cols = 1 if len(panels) == 1 else 2
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 2.6 * rows + 0.6), squeeze=False, sharex=True)
    for ax, (name, keys) in zip(axes.flat, panels, strict=False):
        for key in keys:
            points = table.metrics[key].series
            ax.plot([s for s, _ in points], [v for _, v in points], linewidth=1.3, label=key,
                    marker="o" if len(points) <= 40 else None, markersize=2.5)
        ax.set_title(name, fontsize=10, loc="left")
        ax.grid(alpha=0.3)
        if len(keys) > 1 or keys[0] != name:
            ax.legend(fontsize=7, loc="best", frameon=False)
        if name == "learning rate":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    for ax in list(axes.flat)[: len(panels)]:
        ax.xaxis.set_tick_params(labelbottom=True)  # sharex hides them above a hidden panel
    for ax in list(axes.flat)[max(0, len(panels) - cols) : len(panels)]:
        ax.set_xlabel("step")
    if title:
        fig.suptitle(title, fontsize=12, fontweight="bold")
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
