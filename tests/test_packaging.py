"""The Lua scripts live in a top-level lua/ that is not package data by itself;
a built wheel must carry every one of them where store.loader.lua_dir() looks."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_wheel(outdir: Path) -> Path:
    cmd = [sys.executable, "-m", "build", "--wheel", "--outdir", str(outdir)]
    if importlib.util.find_spec("hatchling") is not None:
        cmd.append("--no-isolation")  # the backend is here already: no index needed
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = outdir.glob("leasequeue-*.whl")
    return wheel


def test_wheel_ships_every_lua_script(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "dist")
    scripts = sorted(p.name for p in (ROOT / "lua").glob("*.lua"))
    assert "_lib.lua" in scripts and len(scripts) > 1
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"leasequeue/lua/{s}" for s in scripts} <= names
    assert "leasequeue/store/scripts.py" in names
    # the dashboard's templates and stylesheet ship as package data
    assert {"leasequeue/dashboard/templates/base.html",
            "leasequeue/dashboard/static/style.css"} <= names
    # the scripts sit beside the package, not as a stray top-level lua/
    assert not [n for n in names if n.startswith("lua/")]

    # an installed copy (a pure-Python wheel unpacked) finds them through lua_dir()
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = ("import sys; from leasequeue.store import loader, specs; "
             "print(loader.lua_dir()); "
             "[loader.script_source(n) for n in specs.SPECS]")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path,
                         env={"PYTHONPATH": str(site), "PATH": ""},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()) == site / "leasequeue" / "lua"
