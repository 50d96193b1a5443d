"""planner/plot.py pictures of plans, rendered headless (Agg) in CI: explain's memory bars,
fit's scatter + Pareto front, fit's GPU-count scaling, budget's sweep; each image is checked
for its pixel size (figure inches x dpi) and for holding more than one colour; svg and pdf
for their headers. Also the progress bar: shown on a terminal, silent when piped."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from matplotlib.image import imread
from rich.console import Console

from planner.plot import DPI, memory_figure, pareto_front, save_figure
from planner.render.common import progress


def _png(path):
    img = imread(path)
    colours = np.unique(img.reshape(-1, img.shape[-1]), axis=0)
    return img.shape[:2], len(colours)


def _size(fig):
    w, h = fig.get_size_inches()
    return round(h * DPI), round(w * DPI)


def test_pareto_front_by_hand():
    # (memory, step): (1, 9) (2, 5) (3, 6) (4, 2) (5, 2) -> front 0, 1, 3 (3 and 5 are beaten)
    assert pareto_front([1, 2, 3, 4, 5], [9, 5, 6, 2, 2]) == [0, 1, 3]
    assert pareto_front([2, 1], [1, 1]) == [1]  # equal step: the smaller memory


def test_explain_plot(cli, tmp_path):
    out = tmp_path / "mem.png"
    r = cli("explain", "--model", "llama3-8b", "--gpus", 8, "--sharding", "fsdp", "--plot", out, "--format", "json")
    assert r.exit_code == 0, r.stderr
    res = json.loads(r.stdout)
    (h, w), n = _png(out)
    assert (h, w) == _size(memory_figure([res])) and n > 10
    for suffix, head in ((".svg", b"<?xml"), (".pdf", b"%PDF")):
        p = tmp_path / f"mem{suffix}"
        assert cli("explain", "--model", "llama3-8b", "--gpus", 8, "--plot", p).exit_code == 0
        assert p.read_bytes().startswith(head)


def test_fit_plots(cli, tmp_path):
    one = tmp_path / "fit.png"
    r = cli("fit", "--model", "llama3-8b", "--gpus", 8, "--pp", 1, "--top", 3, "--plot", one)
    assert r.exit_code == 0, r.stderr
    (h, w), n = _png(one)
    assert (h, w) == (480, 1300) and n > 10  # fit_figure: 13 x 4.8 in at 100 dpi
    several = tmp_path / "scaling.png"
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8,16,32", "--pp", 1, "--tokens", "1T", "--plot", several)
    assert r.exit_code == 0, r.stderr
    (h, w), n = _png(several)
    assert (h, w) == (460, round((4.2 * 4 + 1.5) * 100)) and n > 10  # 4 panels with --tokens
    # the table shows the best row of each count, one row per count
    gpus_col = [ln.split("│")[2].strip() for ln in r.stdout.splitlines() if ln.startswith("│")]
    assert gpus_col == ["8", "16", "32"]


def test_budget_sweep_plot(cli, tmp_path):
    out = tmp_path / "sweep.png"
    r = cli("budget", "--model", "llama3-8b", "--tp", 2, "--tokens", "1T", "--sweep-gpus", "64,128,256",
            "--price-per-gpu-hour", 2, "--plot", out)
    # TP 2 without sharding fits at none of the counts: exit 1 (a budget of plans that cannot run), the picture drawn
    assert r.exit_code == 1, r.stderr
    (h, w), n = _png(out)
    assert (h, w) == (420, 1300) and n > 10
    r = cli("budget", "--model", "llama3-8b", "--gpus", 64, "--tokens", "1T", "--plot", out)
    assert r.exit_code == 2 and "--sweep-gpus" in r.stderr


def test_plot_path_errors(cli, tmp_path):
    r = cli("explain", "--model", "llama3-8b", "--gpus", 8, "--plot", tmp_path / "x.gif")
    assert r.exit_code == 2 and ".png, .svg or .pdf" in r.stderr
    r = cli("fit", "--model", "llama3-8b", "--gpus", 8, "--plot", tmp_path / "no" / "x.png")
    assert r.exit_code == 2 and "does not exist" in r.stderr


def test_save_figure_writes_each_format(tmp_path):
    res = {"plan": {"tp": 2, "cp": 1, "pp": 1, "dp": 4, "vpp": 1, "recompute": "none", "sharding": "fsdp"},
           "memory": {"terms": {"weights": 8 * 2**30, "layer_activations": 30 * 2**30}, "usable_bytes": 72e9,
                      "capacity_bytes": 80e9}}
    fig = memory_figure([res, res])
    for suffix in (".png", ".svg", ".pdf"):
        assert save_figure(fig, tmp_path / f"m{suffix}").stat().st_size > 1000


def test_progress_bar_on_a_terminal_silent_when_piped():
    term = io.StringIO()
    with progress("fit", 3, Console(file=term, force_terminal=True, width=80)) as tick:
        for i, g in enumerate((8, 16, 32), 1):
            tick(i, 3, g)
    assert "fit" in term.getvalue()
    piped = io.StringIO()
    with progress("fit", 3, Console(file=piped, force_terminal=False)) as tick:
        tick(1, 3, 8)
    assert piped.getvalue() == ""


def test_cli_sweeps_are_silent_when_piped(cli):
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8,16", "--pp", 1, "--format", "json")
    assert r.exit_code == 0
    assert "━" not in r.stderr and "GPUs done" not in r.stderr  # CliRunner's stderr is no terminal
