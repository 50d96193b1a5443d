"""The file a launch script names, found as bash would find it when the launch runs: the one lookup of the readers
that read such a file (megatron_deepspeed.config_text: the --deepspeed_config JSON; megatron_bridge._yaml_overrides:
the --config-file YAML).

Where the file comes from, in this order:
  1. the launch's own heredoc for it (`cat <<EOT > $F` or `cat > $F <<EOT` at the script's top level), as
     megatron.command_words collects them: {expanded file name: (body expanded with the script's variables,
     variables it does not set, line)}; a body or a name that uses a variable the script does not set is refused;
  2. a name that still holds `$` (a variable the script does not set) is refused: no file is guessed;
  3. the file itself, an absolute path as given, a relative one resolved against the launch's folder (the readers'
     rule: the launch is run from where it lies); none there is refused naming the field, the name and the path.
Each refusal is a PlannerError (exit 2, `error: ... / hint: ...`) in the reader's own words (Naming).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from .. import files
from ..errors import PlannerError


class Naming(NamedTuple):
    """How a reader names the file in its refusals (each reader's words, as its users and tests know them).

    noun: what the reader calls the launch ('launch', 'script');
    field: the flag that names the file ('--config-file', '--deepspeed_config'): the name and no-file refusals
        start with it;
    in_heredoc: the file as the heredoc refusal names it, a str.format template of {name} and {line};
    unset_hint: the hint of the heredoc refusal;
    missing_hint: the hint of the no-file refusal;
    read_hint: the hint of files.read_text's refusals (a folder, unreadable, not UTF-8);
    says_no_heredoc: the no-file refusal also says the launch writes no heredoc of that name."""
    noun: str
    field: str
    in_heredoc: str
    unset_hint: str
    missing_hint: str
    read_hint: str
    says_no_heredoc: bool = False


def launch_file(name: str, launch: Path, heredocs: dict, where: str, naming: Naming) -> tuple[str, str]:
    """(the file as shown, its text): the launch's heredoc for `name`, else the file `name` resolved relative to the
    launch (module docstring). where: the reader's message prefix ('<launch>: ')."""
    noun = naming.noun
    if name in heredocs:
        text, unknown, line = heredocs[name]
        if unknown:
            raise PlannerError(f"{where}{naming.in_heredoc.format(name=name, line=line)} uses "
                               f"{', '.join('$' + u for u in sorted(unknown))}, which the {noun} does not set",
                               naming.unset_hint)
        return f"{launch} (line {line}: {name})", text
    if "$" in name:
        raise PlannerError(f"{where}{naming.field} {name}: the {noun} does not set its variables",
                           f"set them at the {noun}'s top level, or write the file's name")
    p = Path(name)
    p = p if p.is_absolute() else launch.parent / p
    if not files.is_file(p):
        raise PlannerError(f"{where}{naming.field} {name}: no such file ({p}; resolved relative to the {noun})"
                           + (f" and no `cat <<EOT > {name}` in the {noun}" if naming.says_no_heredoc else ""),
                           naming.missing_hint)
    return str(p), files.read_text(p, naming.read_hint)
