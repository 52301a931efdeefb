"""mkdocs hook: the guide includes README.md and RELIABILITY.md as they are
(written for the repository's root), so the repository files they link to
(screenshots, benchmark results) are added to the site at the same paths
(a Markdown report as a page of its own, outside the nav),
and every link keeps working, checked by `mkdocs build --strict`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
# repository files the README links to, relative to its root
LINKED = ["docs/img", "benchmarks/results", "benchmarks/results/node_peers",
          "benchmarks/results/node_peers_rerun", "benchmarks/results/node_peers_lease_text",
          "benchmarks/results/node_peers_quiet_before",
          "benchmarks/results/node_peers_lease_text_2",
          "benchmarks/results/node_peers_lease_text_3",
          "benchmarks/results/node_peers_footprint",
          "benchmarks/results/node_peers_footprint_2",
          "benchmarks/results/node_peers_footprint_3",
          "benchmarks/results/node_peers_handoff_1",
          "benchmarks/results/node_peers_handoff_2",
          "benchmarks/results/node_peers_handoff_3",
          "benchmarks/results/node_peers_loop_1",
          "benchmarks/results/node_peers_loop_2",
          "benchmarks/results/node_peers_loop_3",
          "benchmarks/results/node_peers_inline_1",
          "benchmarks/results/node_peers_inline_2",
          "benchmarks/results/node_peers_inline_3",
          "benchmarks/results/node_peers_xeon_1",
          "benchmarks/results/node_peers_xeon_2",
          "benchmarks/results/node_peers_amd_1",
          "benchmarks/results/node_peers_amd_2",
          "benchmarks/results/node_peers_amd_3",
          "benchmarks/results/node_peers_payload_inside_1",
          "benchmarks/results/node_peers_payload_inside_2",
          "benchmarks/results/node_peers_payload_inside_3",
          "benchmarks/results/full_xeon",
          "examples/README.md", "SECURITY.md", "deploy/prometheus/alerts.yml", "model/README.md"]
SUFFIXES = {".png", ".md", ".txt", ".jsonl", ".json", ".yml"}


def on_files(files: Files, config: Any) -> Files:
    for linked in LINKED:
        where = ROOT / linked
        for path in sorted(where.iterdir()) if where.is_dir() else [where]:
            if path.suffix in SUFFIXES:
                # a linked report (.md) becomes a page outside the nav (mkdocs.yml not_in_nav)
                files.append(File.generated(config, path.relative_to(ROOT).as_posix(),
                                            abs_src_path=str(path)))
    return files
