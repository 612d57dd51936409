"""The terminal table every summary prints: columns as wide as their widest cell, under a header and a rule.

Usage::

    from loadprobe._table import text_table

    print("\n".join(text_table(["stage", "p95 ms"], [["decode", "1.2"], ["backbone", "14.8"]])))
    text_table(headers, rows, numbers_right=True)   # every column but the first right-aligned

``loadprobe analyze``'s summary, ``loadprobe recommend``, ``loadprobe simulate`` and
``loadprobe align`` all print their tables through it.
"""

from __future__ import annotations

__all__ = ["text_table"]


def text_table(headers, rows, *, numbers_right: bool = False) -> list[str]:
    """The table's lines: the header, a rule of dashes, one line per row; cells two spaces apart.

    Cells are left-aligned; with ``numbers_right`` every column after the first is right-aligned.
    """
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]

    def line(cells) -> str:
        return "  ".join(str(c).rjust(w) if numbers_right and i else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]
