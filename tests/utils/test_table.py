"""utils/table.py: header and rows line up column by column; numbers take their column's format,
text stays as given; a row may end early in a note; more cells than columns is an error."""

import pytest

from verl_lite.utils.table import Column, Table

TABLE = Table(Column("model", 6, align="<"), Column("mode", 5, align="<", gap=2), Column("GB", 7, ".2f"))


def test_header_and_rows_line_up():
    assert TABLE.header() == "model   mode      GB"  # 6, 2 + 5, 7 characters
    assert TABLE.rule() == "-" * 20
    assert TABLE.line("tiny", "none", 1.5) == "tiny    none    1.50"
    assert TABLE.line("tiny", "none", "n/a") == "tiny    none     n/a", "text is placed as it is"
    assert len(TABLE.line("a", "b", 123.456)) == len(TABLE.header())


def test_a_row_may_end_in_a_note():
    assert TABLE.line("7b", "none", note="does not fit") == "7b      none does not fit"


def test_an_int_cell_takes_the_default_format_and_more_cells_than_columns_fail():
    assert Table(Column("n", 4, ",")).line(12345) == "12,345", "wider than its column: not cut"
    with pytest.raises(ValueError, match="3 cells for 2 columns"):
        Table(Column("a", 2), Column("b", 2)).line(1, 2, 3)
