"""The one terminal table: what the summary, recommend, simulate and align print their tables with."""

from __future__ import annotations

from loadprobe._table import text_table


def test_columns_are_as_wide_as_their_widest_cell_under_a_rule():
    lines = text_table(["stage", "p95 ms"], [["decode", "1.2"], ["backbone", 14.8]])
    assert lines == ["stage     p95 ms",
                     "--------  ------",
                     "decode    1.2   ",
                     "backbone  14.8  "]


def test_figures_can_line_up_on_their_last_digit():
    lines = text_table(["stage", "p95 ms", "count"], [["decode", "1.2", "1,024"], ["backbone", "14.8", "3"]],
                       numbers_right=True)
    assert lines == ["stage     p95 ms  count",
                     "--------  ------  -----",
                     "decode       1.2  1,024",
                     "backbone    14.8      3"]


def test_a_table_without_rows_is_its_header_and_rule():
    assert text_table(["plan", "p50 ms"], []) == ["plan  p50 ms", "----  ------"]
