"""render.common.print_rows writes a many-row table without rich where rich would print the same text (a pipe, no
colours, plain cells); these tests print each table both ways and compare the text byte for byte."""
from __future__ import annotations

import io

import pytest
from rich.table import Table

from planner.render import common


def _rich_text(headers, justify, rows, width=1000) -> str:
    buf = io.StringIO()
    tab = Table(title_justify="left")
    for h, j in zip(headers, justify):
        tab.add_column(h, justify=j)
    for r in rows:
        tab.add_row(*r)
    common.console(soft_wrap=True, width=width, file=buf).print(tab)
    return buf.getvalue()


def _printed(capsys, headers, justify, rows, width=1000) -> str:
    capsys.readouterr()
    common.print_rows(headers, justify, rows, width)
    return capsys.readouterr().out


CASES = [
    (["#", "TPxCPxPPxDP", "sharding", "GiB/GPU"], ["right", "left", "left", "right"],
     [["1", "2x1x1x4", "zero2", "38.8"], ["10", "1x1x1x8", "fsdp (hsdp 2)", "146.7"], ["100", "8x1x2x1", "", "5.0"]]),
    (["a long header", "b"], ["left", "right"], [["x", "y"]]),  # headers wider than every cell
    (["#", "stack options"], ["right", "left"], [["1", "TP overlap, DP overlap off, torch.compile"], ["2", "-"]]),
]


@pytest.mark.parametrize("headers,justify,rows", CASES)
def test_plain_rows_are_rich_text(capsys, monkeypatch, headers, justify, rows):
    """Box HEAVY_HEAD, one space of padding, each column as wide as its widest cell or header, justified as rich
    justifies header and cells: the same bytes as rich's table (printed without rich: print_wide is not called)."""
    want = _rich_text(headers, justify, rows)
    monkeypatch.setattr(common, "print_wide", lambda *a: pytest.fail("rich's path taken"))
    assert _printed(capsys, headers, justify, rows) == want


@pytest.mark.parametrize("cell", ["[bold]x[/bold]", "é", "wide 中"])
def test_cells_rich_would_change_go_through_rich(capsys, cell):
    """A cell with console markup (`[bold]` is parsed away by rich) or non-ASCII text (cell widths are not len) is
    printed by rich: the text is rich's own, not the cell as written."""
    rows = [["1", cell]]
    assert _printed(capsys, ["#", "c"], ["right", "left"], rows) == _rich_text(["#", "c"], ["right", "left"], rows)
    if cell.startswith("["):
        assert "[bold]" not in _rich_text(["#", "c"], ["right", "left"], rows)


def test_a_table_wider_than_the_width_goes_through_rich(capsys):
    """rich shrinks a table wider than its console; print_rows leaves that to rich (width 20 here)."""
    rows = [["1", "x" * 30]]
    text = _printed(capsys, ["#", "c"], ["right", "left"], rows, width=20)
    assert text == _rich_text(["#", "c"], ["right", "left"], rows, width=20)
    assert max(len(ln) for ln in text.splitlines()) <= 20


def test_fit_table_many_rows_same_as_rich(cli, monkeypatch):
    """`planner fit` of tiny-fit on 8 GPUs at --top 40: the table printed directly equals rich's (print_rows
    replaced by rich's path), apart from nothing: the wall-time figure is made equal."""
    from planner.render import fit as rfit
    from test_cli_fit import TINY_FIT

    args = ("fit", "--model", TINY_FIT["model"], "--gpus", "8", "--seq-len", "1024", "--global-batch", "64", "--top", "40")
    fast = cli(*args)
    assert fast.exit_code == 0, fast.stderr

    def via_rich(headers, justify, rows, width):
        tab = Table(title_justify="left")
        for h, j in zip(headers, justify):
            tab.add_column(h, justify=j)
        for r in rows:
            tab.add_row(*r)
        common.print_wide(tab, width)

    monkeypatch.setattr(rfit, "print_rows", via_rich)
    slow = cli(*args)
    import re

    norm = lambda s: re.sub(r"in [0-9.]+ s:", "in X s:", s)  # noqa: E731
    assert norm(fast.stdout) == norm(slow.stdout)
    assert len([ln for ln in fast.stdout.splitlines() if ln.startswith("│")]) == 40
