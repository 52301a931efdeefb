"""Installs the peers, each into its own venv under benchmarks/.venvs/, and
BullMQ and bee-queue for Node into benchmarks/node/node_modules.

Why one venv per peer: their pins conflict (arq 0.28 needs redis<6,
taskiq-redis 1.2 needs redis>=8), and one shared venv sends pip into a
minutes-long backtrack that ends on old releases. Versions are pinned so two
runs of the harness compare the same code; a marker file holding the pins
makes a second run skip the install.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENVS = HERE / ".venvs"
NODE_DIR = HERE / "node"

# peer -> pip requirements (pinned; bump deliberately and note it in README)
PIP_PEERS: dict[str, list[str]] = {
    "arq": ["arq==0.28.0"],
    # saq 0.26.4 imports typing_extensions without declaring it
    "saq": ["saq[redis,hiredis]==0.26.4", "typing_extensions"],
    "rq": ["rq==3.0.0"],
    "dramatiq": ["dramatiq[redis]==2.2.1"],
    "celery": ["celery[redis]==5.7.0"],
    "taskiq": ["taskiq==0.13.0", "taskiq-redis==1.2.4"],
    "bullmq-py": ["bullmq==3.4.4"],
    # not a peer: the plot is drawn in this venv (matplotlib is no runtime
    # dependency of leasequeue and stays out of the dev venv)
    "plot": ["matplotlib==3.11.2"],
}
# BullMQ 6 takes its Redis client as an optional peer dependency: ioredis
NODE_PKGS = ["bullmq@6.7.0", "ioredis@6.0.0", "bee-queue@2.0.0"]
NODE_PEERS = ("bullmq-node", "bee-queue-node")  # each a script in benchmarks/node


@dataclass
class EnvStatus:
    name: str
    python: str | None  # the venv's interpreter, None when the install failed
    error: str | None
    seconds: float


def venv_python(name: str) -> Path:
    return VENVS / name / "bin" / "python"


def _marker(name: str) -> Path:
    return VENVS / name / ".installed.json"


def ensure_pip_env(name: str, timeout: float = 600.0) -> EnvStatus:
    """Create the venv and pip-install its pins, unless already done."""
    reqs = PIP_PEERS[name]
    started = time.monotonic()
    marker = _marker(name)
    if marker.exists() and json.loads(marker.read_text()) == reqs:
        return EnvStatus(name, str(venv_python(name)), None, 0.0)
    folder = VENVS / name
    shutil.rmtree(folder, ignore_errors=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True,
                       capture_output=True, timeout=120)
        proc = subprocess.run(
            [str(venv_python(name)), "-m", "pip", "install", "-q",
             "--disable-pip-version-check", *reqs],
            capture_output=True, text=True, timeout=timeout,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        return EnvStatus(name, None, f"venv/pip failed: {exc}", time.monotonic() - started)
    if proc.returncode != 0:
        return EnvStatus(name, None, "pip install failed: " + _tail(proc.stderr),
                         time.monotonic() - started)
    marker.write_text(json.dumps(reqs))
    return EnvStatus(name, str(venv_python(name)), None, time.monotonic() - started)


def ensure_node(peer: str = "bullmq-node", timeout: float = 300.0) -> EnvStatus:
    """npm install the Node peers next to their scripts (node_modules is git-ignored)."""
    started = time.monotonic()
    node = shutil.which("node")
    npm = shutil.which("npm")
    if node is None or npm is None:
        return EnvStatus(peer, None, "node/npm not found on PATH", 0.0)
    if all(_node_installed(pkg) for pkg in NODE_PKGS):
        return EnvStatus(peer, node, None, 0.0)
    try:
        proc = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--no-save", "--loglevel=error",
             *NODE_PKGS],
            cwd=NODE_DIR, capture_output=True, text=True, timeout=timeout,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        return EnvStatus(peer, None, f"npm failed: {exc}", time.monotonic() - started)
    if proc.returncode != 0:
        return EnvStatus(peer, None, "npm install failed: " + _tail(proc.stderr),
                         time.monotonic() - started)
    return EnvStatus(peer, node, None, time.monotonic() - started)


def _node_installed(pkg: str) -> bool:
    name, wanted = pkg.rsplit("@", 1)
    manifest = NODE_DIR / "node_modules" / name / "package.json"
    return manifest.exists() and json.loads(manifest.read_text()).get("version") == wanted


def _tail(text: str, lines: int = 6) -> str:
    kept = [ln for ln in text.strip().splitlines() if not ln.startswith("WARNING: Location")]
    return " | ".join(kept[-lines:])[-800:]


if __name__ == "__main__":  # python benchmarks/envs.py: install only
    for peer in PIP_PEERS:
        print(ensure_pip_env(peer), flush=True)
    print(ensure_node(), flush=True)
