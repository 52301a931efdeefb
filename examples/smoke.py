"""For the examples' --smoke runs (tests/test_examples.py): a worker process
for the duration of a block, stopped with SIGTERM after."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent


@contextmanager
def worker_process() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, str(HERE / "worker.py")], cwd=HERE)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
