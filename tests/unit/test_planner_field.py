"""The field's published RL runs (``benchmarks/data/planner_field.yaml``) as a CI regression check of the planner."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from tests.support.benchmarks import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


def _field() -> ModuleType:
    return load_benchmark("planner_field")


def test_published_runs_are_planned_not_refused_and_stay_within_2x() -> None:
    field = _field()
    rows, floor = field.load()
    assert len(rows) >= 15 and floor >= 0.8
    for row in rows:  # each row cites where its figure comes from, and quotes it
        assert row.url.startswith("https://"), row.id
        figure = row.quoted_figure or row.measured  # a derived step quotes the figure it comes from
        assert f"{figure:g}" in row.quote or repr(figure) in row.quote, row.id
    planned = field.plan_rows(rows)
    refused = [f"{r.id}: {r.refused}" for r in planned if r.refused]
    assert not refused, refused
    stats = field.summary(planned)
    assert stats["within_2x"] >= floor, stats
    assert stats["memory_within_1_5x"] >= 0.8, stats  # where a source publishes memory per GPU


def test_the_table_in_the_repository_was_written_from_the_data() -> None:
    field = _field()
    rows, _ = field.load()
    text = (ROOT / "benchmarks" / "planner_field.md").read_text(encoding="utf-8")
    for row in rows:
        assert row.id in text and row.url in text
    for accepted in field.ran():
        assert accepted.id in text and accepted.url in text
    for skipped in field.unplanned():  # published figures left out say what their source does not give
        assert skipped.id in text and skipped.missing.split(" (")[0] in text


def test_published_runs_without_a_step_time_are_not_refused() -> None:
    field = _field()
    rows = field.plan_ran(field.ran())
    assert rows, "the data lists configurations that really ran"
    for row in rows:
        assert row.url.startswith("https://") and row.quote, row.id
    refused = [f"{r.id}: {r.refused}" for r in rows if r.refused]
    assert not refused, refused
