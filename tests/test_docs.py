"""The docs site: every public class and function that leasequeue/__init__.py
exports has a docstring of its own (the API reference is generated from
them), and `mkdocs build --strict` passes (no broken link, no missing
include, no reference that does not resolve)."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import leasequeue

ROOT = Path(__file__).resolve().parent.parent


def _own_doc(obj: object, name: str) -> str:
    doc = vars(obj).get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    doc = (doc or "").strip()
    # a dataclass without a docstring gets its signature as one: not documentation
    return "" if doc.startswith(f"{name}(") else doc


def test_every_export_has_a_docstring() -> None:
    missing = []
    for name in leasequeue.__all__:
        obj = getattr(leasequeue, name)
        if not _own_doc(obj, name):
            missing.append(name)
        if not inspect.isclass(obj):
            continue
        for member, value in vars(obj).items():
            if member.startswith("_"):
                continue
            target = value.fget if isinstance(value, property) else value
            if isinstance(target, staticmethod | classmethod):
                target = target.__func__
            if inspect.isfunction(target) and not (target.__doc__ or "").strip():
                missing.append(f"{name}.{member}")
    assert missing == [], f"no docstring: {', '.join(missing)}"


def test_the_docs_site_builds_strict(tmp_path: Path) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
         str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    for name in ("App", "Worker", "Context", "RedisLimiter", "exponential", "JobDead"):
        assert f'id="leasequeue.{name}"' in api or f'id="leasequeue.errors.{name}"' in api, name
    guide = (tmp_path / "site" / "index.html").read_text()
    assert "Web dashboard" in guide and "docs/img/dashboard-queues.png" in guide
