"""mkdocs hook: the guide includes README.md, RELIABILITY.md and
DESIGN-NOTES.md as they are (written for the repository's root), so the
repository files they link to (screenshots, benchmark results) are added
to the site at the same paths (a Markdown report as a page of its own,
outside the nav), and every link keeps working, checked by `mkdocs build
--strict`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
# repository files the README links to, relative to its root; a folder is
# taken with its subfolders (every benchmark run the README cites has one)
LINKED = ["docs/img", "benchmarks/results", "benchmarks/HISTORY.md",
          "benchmarks/STANDING.md", "examples/README.md",
          "SECURITY.md",
          "deploy/prometheus/alerts.yml", "model/README.md"]
SUFFIXES = {".png", ".md", ".txt", ".jsonl", ".json", ".yml"}


def on_files(files: Files, config: Any) -> Files:
    for linked in LINKED:
        where = ROOT / linked
        for path in sorted(where.rglob("*")) if where.is_dir() else [where]:
            if path.suffix in SUFFIXES:
                # a linked report (.md) becomes a page outside the nav (mkdocs.yml not_in_nav)
                files.append(File.generated(config, path.relative_to(ROOT).as_posix(),
                                            abs_src_path=str(path)))
    return files
