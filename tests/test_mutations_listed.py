"""RELIABILITY.md's table of planted bugs is the catalogue in
tests/mutations/mutations.py: every mutation has its row, with its file
and the tests that must fail, and no row names a mutation that is gone."""

from __future__ import annotations

import re
from pathlib import Path

from tests.mutations.mutations import MUTATIONS

RELIABILITY = Path(__file__).resolve().parent.parent / "RELIABILITY.md"
ROW = re.compile(r"^\| `([a-z0-9-]+)` \| `([^`]+)` \| .* \| (.+) \|$", re.M)


def test_every_planted_bug_has_its_row_and_every_row_its_bug() -> None:
    rows = {name: (path, tests) for name, path, tests in ROW.findall(RELIABILITY.read_text())}
    names = {m.name for m in MUTATIONS}
    assert sorted(names - rows.keys()) == [], "mutations without a row in RELIABILITY.md"
    assert sorted(rows.keys() - names) == [], "rows of RELIABILITY.md naming no mutation"
    for m in MUTATIONS:
        path, tests = rows[m.name]
        assert path == m.path, m.name
        for selection in m.selection:
            assert f"`{selection.removeprefix('tests/')}`" in tests, (m.name, selection)


def test_the_count_reliability_gives_is_the_catalogue_s() -> None:
    """RELIABILITY.md's "(2026-12-06; N since)": N is how many planted bugs
    the catalogue holds now."""
    found = re.search(r"\(2026-12-06; (\d+) since\)", RELIABILITY.read_text())
    assert found is not None and int(found.group(1)) == len(MUTATIONS)


def test_every_planted_bug_s_text_occurs_once_in_its_file() -> None:
    """What the runner checks before it plants anything, here in the fast
    suite: a change that repeats a planted bug's text (or drops it) is seen
    by the commit that makes it, not by the 7-minute run of every bug."""
    root = RELIABILITY.parent
    counts = {m.name: (root / m.path).read_text().count(m.old) for m in MUTATIONS}
    assert {name: n for name, n in counts.items() if n != 1} == {}
