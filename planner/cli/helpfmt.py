"""--help that reads in an 80-column terminal (issue 24).

typer's rich help lays the options out as a six-column table that, at 80 columns, cuts
long option names (`--max-micro-bat…`) and shows a `<bool>` placeholder on every flag. The
planner uses click's plain help instead (rich_markup_mode=None on every Typer): one option
per line, a name too long for the first column on a line of its own, the help wrapped
beside it, flags as `--x / --no-x` with no placeholder. Click shortens each command's
one-line description in a group's command list to the width left; HelpGroup prints the
first paragraph of every command's help in full, wrapped.
"""

from __future__ import annotations

from typer.core import TyperGroup


def first_paragraph(text: str | None) -> str:
    """The first paragraph of a help text, its hard line breaks joined."""
    return " ".join((text or "").strip().split("\n\n")[0].split())


class HelpGroup(TyperGroup):
    """A command group whose command list gives each command's description in full."""

    def format_commands(self, ctx, formatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            rows.append((name, cmd.short_help or first_paragraph(cmd.help)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
