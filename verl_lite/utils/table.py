"""Fixed-width text tables, as the planner (plan.py) and the scripts (gpu_check.py, bench_lora.py)
print them: a header, then one line per row, every column at the same place.

Each column is declared once (name, width, alignment, number format, spaces before it), so a header
and its rows cannot drift apart when a column is added. A cell is a number, formatted with its
column's format, or text placed as it is (a number formatted its own way, "-", "n/a"). A line may
stop before the last column and end in a note instead ("does not fit (planner: 20.0 GB ...)").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    name: str
    width: int
    fmt: str = ""  # format spec of a number cell, e.g. ".2f" or ","
    align: str = ">"  # ">" right, "<" left
    gap: int = 0  # spaces before the column


class Table:
    def __init__(self, *columns: Column):
        self.columns = columns

    def header(self) -> str:
        return "".join(" " * c.gap + f"{c.name:{c.align}{c.width}}" for c in self.columns)

    def rule(self) -> str:
        return "-" * len(self.header())

    def line(self, *cells: object, note: str = "") -> str:
        """The first len(cells) columns, then `note`."""
        if len(cells) > len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns: {cells!r}")
        out = []
        for column, cell in zip(self.columns, cells):
            text = cell if isinstance(cell, str) else format(cell, column.fmt)
            out.append(" " * column.gap + f"{text:{column.align}{column.width}}")
        return "".join(out) + note
