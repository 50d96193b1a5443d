"""`planner fit --export FMT --output FILE` (issue 22/24 audit): fit's --export wrote the trainer config to
stdout only, while `planner export` takes --output / -o; `planner fit --export megatron --out F` was
answered "no such option: --out (Possible options: --plot, --quiet, --tp)". Now fit takes --output / -o
with --export (the same file, read back as before), refuses it without --export, and checks the path
before the search (as export does)."""

from __future__ import annotations


def test_fit_writes_the_export_to_the_output_file(cli, tmp_path):
    out = tmp_path / "run.sh"
    r = cli("fit", "--model", "mistral-7b", "--gpus", "8", "--export", "megatron", "--output", str(out))
    assert r.exit_code == 0, r.stderr
    assert r.stdout == ""
    text = out.read_text()
    assert text.startswith("#!/bin/bash\n") and "--num-layers 32" in text and "--window-size 4095,0" in text
    # the same text fit prints without --output
    r2 = cli("fit", "--model", "mistral-7b", "--gpus", "8", "--export", "megatron")
    assert r2.exit_code == 0 and r2.stdout == text


def test_output_without_export_and_a_bad_path_are_refused(cli, tmp_path):
    r = cli("fit", "--model", "mistral-7b", "--gpus", "8", "-o", str(tmp_path / "x.sh"))
    assert r.exit_code == 2 and "--output writes the --export file" in r.stderr and "\nhint: add --export" in r.stderr
    r = cli("fit", "--model", "mistral-7b", "--gpus", "8", "--export", "megatron", "-o", str(tmp_path / "no" / "x.sh"))
    assert r.exit_code == 2 and "does not exist" in r.stderr
    assert not (tmp_path / "x.sh").exists()
