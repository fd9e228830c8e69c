"""Summary dict → text a person reads in ten seconds (``job_summary.txt``) or a rich table in a terminal.

Plain text has no colour and no rich import (it is also what ``--summary`` prints when stdout is not a
TTY); :func:`print_rich` is used only on a TTY.
"""

from __future__ import annotations

from typing import Any

SPARK = "▁▂▃▄▅▆▇█"
MAX_METRIC_ROWS = 14


def sparkline(values: list[float], width: int = 24) -> str:
    """``▇▅▄▃▂▂▁``: the curve's shape in one cell; flat series give a flat line."""
    if not values:
        return ""
    if len(values) > width:
        step = len(values) / width
        values = [values[int(i * step)] for i in range(width - 1)] + [values[-1]]
    lo, hi = min(values), max(values)
    span = hi - lo
    if span <= 0:
        return SPARK[3] * len(values)
    return "".join(SPARK[min(7, int((v - lo) / span * 8))] for v in values)


def fmt_num(value: float | None) -> str:
    if value is None:
        return "—"
    if value - value != 0:  # NaN, ±Inf: shown as such, never as a number
        return "NaN" if value != value else ("Inf" if value > 0 else "-Inf")
    if value == int(value) and abs(value) < 1e7:
        return f"{int(value):,}"
    if abs(value) >= 1e4:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.4g}"
    return f"{value:.4g}" if abs(value) >= 1e-3 else f"{value:.3e}"


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = round(max(0, seconds))  # rounded like the efficiency row's elapsed time, not cut
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def headline(summary: dict[str, Any]) -> str:
    state = summary["state"]
    if summary.get("exit_code") is not None and state != "CANCELLED":  # a cancel's exit code is the signal's
        state += f" (exit {summary['exit_code']})"
    if summary.get("state_inferred"):
        state += " (inferred from the log)"
    line = f"{summary['name']}  {state}"
    if summary.get("failure"):
        line += f" — {summary['failure']}"
    elif summary.get("alerts"):  # a NaN/Inf metric is the news when nothing failed: a diverged run is not healthy
        line += f" — {summary['alerts'][0]}"
    return line


def attempt_line(attempt: dict[str, Any]) -> str:
    """One pod of a ``runpod up --retry`` run: its number, the pod, how it ended, what it resumed from."""
    from gputrain.logs.display import terminal_safe

    reason = str(attempt.get("reason") or "").split("; ")[0]
    start = f"checkpoint {attempt['resumed_from']}" if attempt.get("resumed_from") else "the start"
    cost = attempt.get("cost_usd")
    text = (f"{attempt.get('attempt', '?')}: pod {attempt.get('pod_id') or '(none)'} {attempt.get('state', '?')}"
            f"{f' ({reason[:120]})' if reason else ''}, from {start}"
            f"{f', ${cost:.2f}' if isinstance(cost, (int, float)) else ''}")
    return terminal_safe(text)


def overview_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = [("alert", alert) for alert in summary.get("alerts") or []]
    when = f"{summary['start'] or '?'} → {summary['end'] or 'now'}  ({fmt_duration(summary['duration_s'])})"
    rows.append(("time", when))
    hw = summary.get("hardware")
    if hw and hw.get("gpu"):
        text = f"{hw['gpu']} × {hw.get('gpus_per_node') or 1} × {hw.get('nodes') or 1} node(s)"
        cost = summary["cost"]
        if cost.get("gpu_hours") is not None:
            text += f"   {cost['gpu_hours']:.2f} GPU-h"
            if cost.get("usd") is not None:
                text += f" ≈ ${cost['usd']:.2f}"
        rows.append(("hardware", text))
    steps = summary["steps"]
    text = fmt_num(steps["done"])
    if steps["planned"]:
        pct = 100 * (steps["done"] or 0) / steps["planned"]
        text += f" / {fmt_num(steps['planned'])} ({pct:.0f}%)"
    if summary.get("steps_per_hour"):
        text += f"   {fmt_num(round(summary['steps_per_hour']))} steps/h"
    if summary.get("eta_s") is not None:
        text += f"   ETA {fmt_duration(summary['eta_s'])}"
    rows.append(("steps", text))
    speed = [f"{k} {fmt_num(round(v, 1))} (median)" for k, v in summary.get("throughput", {}).items()]
    if summary.get("warmup_seconds"):  # the GRPO trainers: warm-up steps, the compile inside them
        compiled = f", compile {summary['compile_seconds']:.1f} s of it" if summary.get("compile_seconds") else ""
        speed.append(f"warm-up {summary['warmup_seconds']:.1f} s{compiled} (start-up, not in the step time)")
    elif summary.get("compile_seconds"):
        speed.append(f"compile {summary['compile_seconds']:.1f} s (start-up, not in the step time)")
    if summary.get("peak_gpu_mem_gib") is not None:
        speed.append(f"peak GPU mem {summary['peak_gpu_mem_gib']:.1f} GiB")
    if speed:
        rows.append(("speed", "   ".join(speed)))
    ckpts = summary.get("checkpoints") or []
    if ckpts:
        rows.append(
            ("checkpoints", f"{len(ckpts)} ({ckpts[0]} … {ckpts[-1]})" if len(ckpts) > 1 else ckpts[0])
        )
    rows += [("attempt", attempt_line(a)) for a in (summary.get("runpod") or {}).get("attempts") or []]
    rl = summary.get("rl")
    if rl:
        parts = [f"reward {fmt_num(rl['reward'])}"] if rl.get("reward") is not None else []
        parts += [f"{name} {fmt_num(value)}" for name, value in (rl.get("components") or {}).items()]
        if rl.get("completion_length") is not None:
            parts.append(f"completion length {fmt_num(rl['completion_length'])}")
        rows.append(("rl (last)", "   ".join(parts)))
    cause = summary.get("root_cause")
    if cause:
        # "group" is how the rule classified the line (launcher, worker, verdict): not a fact for the reader
        facts = [f"rank {cause['rank']}"] if cause.get("rank") is not None else []
        facts += [f"{k} {fmt_num(v) if isinstance(v, float) else v}" for k, v in (cause.get("details") or {}).items()
                  if v is not None and k != "group"]
        if facts:
            rows.append(("cause", f"{cause['label']}: " + ", ".join(facts)))
    remedy = (cause or {}).get("remedy") if isinstance(cause, dict) else None
    if isinstance(remedy, dict) and remedy.get("text"):
        rows.append(("fix", f"{remedy['text']} (the command: gputrain logs JOB --fix)"))
    for key, pair in (summary.get("predicted_vs_measured") or {}).items():
        rows.append(("predicted", f"{key} {fmt_num(pair['predicted'])} vs measured {fmt_num(pair['measured'])}"))
    if summary.get("efficiency"):
        rows.append(("efficiency", efficiency_line(summary["efficiency"])))
    changed = summary.get("changed")
    if isinstance(changed, dict) and changed.get("since"):
        diff = changed.get("changes") or []
        text = ", ".join(str(c) for c in diff) if diff else "no change in versions, commit, CUDA or driver"
        rows.append(("changed", f"since job {changed['since']}: {text}"))
    if summary.get("sampled"):
        skipped = summary["sampled"]["bytes_skipped"] / 2**20
        rows.append(("note", f"large log: sampled ({skipped:,.0f} MiB of metric lines not read); "
                             "min/max/best are over the lines read, last values exact"))
    if summary.get("result"):
        nums = {k: v for k, v in summary["result"].items() if isinstance(v, (int, float))}
        rows.append(("result", "  ".join(f"{k} {fmt_num(v)}" for k, v in list(nums.items())[:6])))
        lines = summary["result"].get("headline")  # a training's own one-line findings (GNN: per family)
        for line in lines if isinstance(lines, list) else []:
            rows.append(("result", str(line)))
        # the training's own warnings about its numbers (RL: a reward won by empty output, a summed reward
        # rising while its parts fall), one row each: a person must not miss them in ten seconds
        flags = summary["result"].get("flags")
        for flag in flags if isinstance(flags, list) else []:
            rows.append(("warning", str(flag)))
    return rows


def efficiency_line(report: dict[str, Any]) -> str:
    """The summary's ``efficiency`` row (``gputrain.doctor.efficiency`` fills the report), like ``seff``:
    ``elapsed 0:12:30 (21 % of 1:00:00), CPU 38 % of 8 cores, memory peak 3.10 GiB (19 % of 16 GiB)``."""

    def hms(seconds: float) -> str:
        s = round(seconds)
        return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"

    def pct(x: float) -> str:
        return f"{100 * x:.0f} %"

    parts = [f"elapsed {hms(report['elapsed_s'])}"
             + (f" ({pct(report['time_used'])} of {hms(report['time_limit_s'])})" if report["time_used"] else "")]
    if report["cpu_efficiency"] is not None:
        parts.append(f"CPU {pct(report['cpu_efficiency'])} of {report['cpus']} cores")
    if report["memory_peak_gib"] is not None:
        held = f"memory peak {report['memory_peak_gib']:.2f} GiB"
        if report["memory_efficiency"] is not None:
            held += f" ({pct(report['memory_efficiency'])} of {report['memory_gib']} GiB)"
        parts.append(held)
    if report["gpu_hours"]:
        parts.append(f"{report['gpu_hours']:.2f} GPU hours")
    return ", ".join(parts) + f" [{report['source']}]"


def metric_rows(summary: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    series = summary.get("series", {})
    keys = list(series) + [k for k in summary["metrics"] if k not in series]
    keys.sort(key=lambda k: not summary["metrics"][k].get("nonfinite"))  # a NaN metric is never cut from the table
    rows = []
    for key in keys[:MAX_METRIC_ROWS]:
        m = summary["metrics"][key]
        best = f"{fmt_num(m['best'])} @{fmt_num(m['best_step'])}" if m.get("best") is not None else "—"
        spark = sparkline([v for _, v in series.get(key, [])])
        rows.append((key, fmt_num(m["first"]), fmt_num(m["last"]), best, spark))
    return rows


def render_text(summary: dict[str, Any]) -> str:
    lines = [headline(summary), ""]
    lines += [f"{k:<12}{v}" for k, v in overview_rows(summary)]
    rows = metric_rows(summary)
    if rows:
        width = max(len(r[0]) for r in rows) + 2
        lines += ["", f"{'metric':<{width}}{'first':>12}{'last':>12}   {'best':<20}curve"]
        lines += [f"{r[0]:<{width}}{r[1]:>12}{r[2]:>12}   {r[3]:<20}{r[4]}" for r in rows]
        hidden = len(summary["metrics"]) - len(rows)
        if hidden > 0:
            lines.append(f"(+{hidden} more metrics in summary.json)")
    if summary.get("traceback"):
        tb = summary["traceback"].splitlines()
        lines += ["", "last traceback:"] + [f"  {x}" for x in tb[-15:]]
    return "\n".join(lines) + "\n"


def print_rich(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    style = {"COMPLETED": "green", "RUNNING": "cyan", "PREEMPTED": "yellow"}.get(summary["state"], "red")
    # Log text ("[/rank0] ...", "x[/y]") must not be read as rich markup: a stray closing tag raises.
    rest = escape(headline(summary)[len(summary["name"]) + 2 :])
    console.print(f"[bold]{escape(summary['name'])}[/]  [{style}]{rest}[/]", highlight=False)
    for key, value in overview_rows(summary):
        console.print(f"[dim]{key:<12}[/]{escape(value)}", highlight=False)
    rows = metric_rows(summary)
    if rows:
        table = Table(show_edge=False, pad_edge=False)
        for col in ("metric", "first", "last", "best", "curve"):
            table.add_column(col, justify="right" if col in ("first", "last") else "left")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    if summary.get("traceback"):
        console.print("[bold red]last traceback:[/]")
        console.print("\n".join(summary["traceback"].splitlines()[-15:]), highlight=False, markup=False)
