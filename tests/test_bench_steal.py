"""The harness's record of the hypervisor's steal time (benchmarks/common.py,
run.py, report.py): the share of the CPUs' time another guest took over a
bench, and the results' header naming the benches it took 1% or more of."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import common  # (benchmarks/ is a folder of scripts, not a package)
import report


def test_steal_share_is_stolen_cpu_seconds_over_the_cpus_wall_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert common.steal_share(10.0, 11.0, 5.0) == pytest.approx(0.1)  # 1 s of 2 CPUs x 5 s
    assert common.steal_share(10.0, 10.0, 5.0) == 0.0
    assert common.steal_share(None, 11.0, 5.0) is None
    assert common.steal_share(10.0, None, 5.0) is None
    assert common.steal_share(10.0, 11.0, 0.0) is None


def test_steal_seconds_reads_this_host_or_says_it_cannot() -> None:
    stolen = common.steal_seconds()
    if Path("/proc/stat").exists():
        assert stolen is not None and stolen >= 0.0
    else:
        assert stolen is None


def results_with(steal_pct: float | None, reps: dict[str, list[float]]) -> dict[str, Any]:
    def runs(shares: list[float]) -> list[dict[str, Any]]:
        return [{"rep": i, "lines": [{"metric": "enqueue_one", "value": 1.0,
                                      "steal_pct": share}]}
                for i, share in enumerate(shares)]

    return {"machine": {"steal_pct": steal_pct},
            "leasequeue": {"runs": runs(reps.get("leasequeue", []))},
            "peers": {name: {"runs": runs(shares)} for name, shares in reps.items()
                      if name != "leasequeue"}}


def test_the_header_names_the_benches_the_hypervisor_took_1_percent_or_more_of() -> None:
    line = report._stolen(results_with(0.8, {"leasequeue": [0.2, 3.5, 0.9],
                                              "bee-queue-node": [1.0, 0.0]}))
    assert line.startswith("steal (CPU time the hypervisor gave other guests): 0.8%")
    assert "leasequeue rep 1 3.5%" in line and "bee-queue-node rep 0 1.0%" in line
    assert "rep 2" not in line and "rep 0 0.2" not in line
    quiet = report._stolen(results_with(0.1, {"leasequeue": [0.2]}))
    assert quiet == ("steal (CPU time the hypervisor gave other guests): 0.1% of the CPUs' "
                     "time over the run (its install step included)")
    assert report._stolen(results_with(None, {"leasequeue": [5.0]})) == ""  # an older run
