"""Per-metric running statistics in bounded memory, serializable so summaries can resume.

A 1 GiB log may hold millions of values; the summary needs first/last/best, a median and a curve.
:class:`MetricStats` keeps exact first/last/min/max/count and a uniformly thinned series of at most
``2 * MAX_POINTS`` points (every ``stride``-th value; the stride doubles when the series is full).
"""

from __future__ import annotations

import bisect
from typing import Any

from gputrain.logs.catalog import metric_info

MAX_POINTS = 256


class MetricStats:
    __slots__ = ("count", "first", "hi", "last", "lo", "nonfinite", "nonfinite_first", "series", "stride")

    def __init__(self) -> None:
        self.count = 0
        self.first: tuple[float, float] = (0.0, 0.0)  # (step, value)
        self.last: tuple[float, float] = (0.0, 0.0)
        self.lo: tuple[float, float] = (0.0, float("inf"))
        self.hi: tuple[float, float] = (0.0, float("-inf"))
        self.series: list[tuple[float, float]] = []
        self.stride = 1
        self.nonfinite = 0  # NaN/Inf values: counted, never compared (a NaN loss must not read "best 0")
        self.nonfinite_first: tuple[float, float] | None = None

    def add(self, step: float, value: float) -> None:
        # The hot path of a summary (once per value): compare against the stored pairs, allocate one tuple.
        count = self.count
        point = (step, value)
        if value - value != 0:  # NaN or ±Inf
            self._add_nonfinite(point)
            return
        if count == 0:
            self.first = point
        elif step < self.last[0]:
            # A resumed run replays the steps after its checkpoint: the curve keeps the newer values.
            del self.series[bisect.bisect_left(self.series, (step, float("-inf"))) :]
        self.last = point
        if value < self.lo[1]:
            self.lo = point
        if value > self.hi[1]:
            self.hi = point
        if count % self.stride == 0:
            series = self.series
            series.append(point)
            if len(series) >= 2 * MAX_POINTS:
                del series[1::2]
                self.stride *= 2
        self.count = count + 1

    def _add_nonfinite(self, point: tuple[float, float]) -> None:
        if self.nonfinite_first is None:
            self.nonfinite_first = point
        if self.count == 0:
            self.first = point
        self.last = point
        self.nonfinite += 1
        self.count += 1

    def best(self, key: str) -> tuple[float, float] | None:
        """(step, value) of the best value, or None for a metric without a direction (lr, epoch...)."""
        better = metric_info(key).better
        if self.count == self.nonfinite:  # no finite value at all
            return None
        return self.lo if better == "lower" else self.hi if better == "higher" else None

    def median(self) -> float:
        """``statistics.median`` of the series, without its 10 ms of imports (fractions, decimal)."""
        values = sorted(v for _, v in self.series)
        if not values:
            return 0.0
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2

    def rescale(self, factor: float) -> None:
        """Multiply every step by ``factor`` (epochs → steps), rounding to whole steps."""
        def scale(point: tuple[float, float]) -> tuple[float, float]:
            return (float(round(point[0] * factor)), point[1])

        self.first, self.last, self.lo, self.hi = (scale(p) for p in (self.first, self.last, self.lo, self.hi))
        self.series = [scale(p) for p in self.series]
        if self.nonfinite_first is not None:
            self.nonfinite_first = scale(self.nonfinite_first)

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "first": self.first,
            "last": self.last,
            "lo": self.lo,
            "hi": self.hi,
            "series": self.series,
            "stride": self.stride,
            "nonfinite": self.nonfinite,
            "nonfinite_first": self.nonfinite_first,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MetricStats:
        stats = cls()
        stats.count = int(data["count"])
        stats.first, stats.last = tuple(data["first"]), tuple(data["last"])
        stats.lo, stats.hi = tuple(data["lo"]), tuple(data["hi"])
        stats.series = [(float(s), float(v)) for s, v in data["series"]]
        stats.stride = int(data["stride"])
        stats.nonfinite = int(data.get("nonfinite", 0))
        first = data.get("nonfinite_first")
        stats.nonfinite_first = (float(first[0]), float(first[1])) if first else None
        return stats


class MetricTable:
    """All metrics of one source, plus the step/time range they cover."""

    def __init__(self) -> None:
        self.metrics: dict[str, MetricStats] = {}
        self.records = 0
        self.skipped = 0  # bytes of dense stretches left out of the statistics (sampled)
        self.max_step = -1
        self.first_time: float | None = None
        self.last_time: float | None = None

    def add(self, step: float, values: dict[str, float], stamp: float | None = None) -> None:
        self.records += 1
        self.max_step = max(self.max_step, int(step))  # epochs for HF dicts until in_steps()
        if stamp is not None:
            if self.first_time is None:
                self.first_time = stamp
            self.last_time = stamp
        metrics = self.metrics
        for key, value in values.items():
            stats = metrics.get(key)
            if stats is None:
                stats = metrics[key] = MetricStats()
            count = stats.count
            # MetricStats.add inlined for the common case (a finite value after the last step): a method call
            # per value was a quarter of a summary's time. The first value, NaN/Inf and replays take add().
            if count == 0 or value - value != 0 or step < stats.last[0]:
                stats.add(step, value)
                continue
            point = (step, value)
            stats.last = point
            if value < stats.lo[1]:
                stats.lo = point
            if value > stats.hi[1]:
                stats.hi = point
            if count % stats.stride == 0:
                series = stats.series
                series.append(point)
                if len(series) >= 2 * MAX_POINTS:
                    del series[1::2]
                    stats.stride *= 2
            stats.count = count + 1

    def in_steps(self, factor: float | None) -> MetricTable:
        """A copy whose x axis is steps: epochs x ``factor`` (None: the copy keeps epochs)."""
        table = MetricTable.from_json(self.to_json())
        if factor:
            for stats in table.metrics.values():
                stats.rescale(factor)
            table.max_step = int(max((s.last[0] for s in table.metrics.values()), default=-1))
        return table

    def to_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "skipped": self.skipped,
            "max_step": self.max_step,
            "first_time": self.first_time,
            "last_time": self.last_time,
            "metrics": {k: v.to_json() for k, v in self.metrics.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MetricTable:
        table = cls()
        table.records = int(data["records"])
        table.skipped = int(data.get("skipped", 0))
        table.max_step = int(data["max_step"])
        table.first_time, table.last_time = data["first_time"], data["last_time"]
        table.metrics = {k: MetricStats.from_json(v) for k, v in data["metrics"].items()}
        return table
