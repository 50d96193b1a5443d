"""Every start-up rule's code has its row in the README's rule table, naming the rule's key, and the table has no
row past the last code: the one place that checks the newest code, so a new rule (LATER_RULES or
FIXED_CODE_RULES) updates the README, not a `max(CODES.values()) == N` in every test file that once added one."""
import re
from pathlib import Path

from planner.startup import CODES, FIXED_CODE_RULES, LATER_FIRST_CODE, LATER_RULES

README = Path(__file__).resolve().parents[1] / "README.md"


def _rows():
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \| ([^|]*)\|", README.read_text(), re.M)}


def test_every_code_has_its_readme_row():
    rows = _rows()
    missing = {c: k for k, c in CODES.items() if c not in rows or k not in rows[c]}
    assert missing == {}
    assert max(rows) == max(CODES.values())


def test_codes_are_unique_and_later_codes_contiguous():
    """LATER_RULES take LATER_FIRST_CODE on, one each in order; FIXED_CODE_RULES' codes follow them, the first right
    after them, each once (handed out ahead to parallel work, so merges cannot renumber a code a user has seen). A code
    handed out to a session that did not need it, or whose branch is not merged yet, leaves a gap (102-105 went to
    sessions beside the one that took 106-107)."""
    assert len(set(CODES.values())) == len(CODES)
    later = [CODES[r.key] for r in LATER_RULES]
    fixed = sorted(c for c, _ in FIXED_CODE_RULES)
    assert later == list(range(LATER_FIRST_CODE, LATER_FIRST_CODE + len(LATER_RULES)))
    assert fixed[0] == later[-1] + 1 and len(set(fixed)) == len(fixed)
