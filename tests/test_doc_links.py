"""Every relative link in the project's Markdown (README.md, RELIABILITY.md,
SECURITY.md, DESIGN-NOTES.md, benchmarks/*.md, the results' reports,
model/README.md, the guide) names a file that exists inside the repository,
and every ``#anchor`` into a Markdown file names one of its headings
(GitHub's rule: lower case, punctuation dropped, spaces as hyphens, ``-1``,
``-2``... for a heading repeated). A page that moves text about, as the
README's benchmark section did into benchmarks/STANDING.md, cannot leave a
link behind pointing at nothing. (The docs site's `mkdocs build --strict`,
tests/test_docs.py, checks the same links as the site serves them.)"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"```.*?```", re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.M)


def markdown_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True,
                             text=True, timeout=30, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):  # not a git checkout: the files on disk
        return sorted(p for p in ROOT.rglob("*.md")
                      if not any(part.startswith(".") or part == "node_modules"
                                 for part in p.relative_to(ROOT).parts))
    return [ROOT / name for name in out]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text as rendered (a link's text,
    no HTML tag), lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().rstrip("#").strip())
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for match in HEADING.finditer(FENCE.sub("", path.read_text())):
        s = slug(match.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return frozenset(out)


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """The relative links of the page at ``path`` that leave ``root`` (the
    repository), name no file, or name no heading of a Markdown page."""
    bad = []
    for match in LINK.finditer(FENCE.sub("", path.read_text())):
        target = match.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file, _, fragment = target.partition("#")
        linked = (path.parent / file) if file else path
        if not linked.resolve().is_relative_to(root):
            bad.append(f"{target}: outside the repository")
        elif not linked.exists():
            bad.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            bad.append(f"{target}: no such heading")
    return bad


def test_the_slug_is_githubs() -> None:
    assert slug("Redis Cluster, Sentinel, sharded queues, durable mode") == \
        "redis-cluster-sentinel-sharded-queues-durable-mode"
    assert slug("Orphan reconciliation (the resource ledger)") == \
        "orphan-reconciliation-the-resource-ledger"
    assert slug("From web code: the sync producer, and examples") == \
        "from-web-code-the-sync-producer-and-examples"
    assert slug("`App`'s one enqueue per call") == "apps-one-enqueue-per-call"
    assert slug("Where the enqueue→start p50 goes") == "where-the-enqueuestart-p50-goes"
    assert slug("A/B of [the round](x.md) ##") == "ab-of-the-round"


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "outside.md").write_text("")
    page = tmp_path / "repo" / "page.md"
    page.parent.mkdir()
    (page.parent / "there.md").write_text("# A heading\n")
    page.write_text("[ok](there.md#a-heading) [gone](missing.md) [bad](there.md#nope) "
                    "[web](https://example.com) [self](#top)\n# Top\n"
                    "[up](../outside.md)\n```\n[x](in-a-fence.md)\n```\n")
    assert broken_links(page, root=page.parent) == [
        "missing.md: no such file", "there.md#nope: no such heading",
        "../outside.md: outside the repository"]


def test_every_relative_link_resolves() -> None:
    files = markdown_files()
    assert ROOT / "README.md" in files
    bad = [f"{path.relative_to(ROOT)}: {link}" for path in files for link in broken_links(path)]
    assert bad == []
