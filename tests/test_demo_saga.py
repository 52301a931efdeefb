"""`leasequeue demo --saga`: the crashed order completes without a second
charge, the refused order ends compensated (the ledger says so)."""

from __future__ import annotations

import pytest

from leasequeue.demo_saga import run_saga_demo

pytestmark = pytest.mark.anyio


async def test_the_saga_demo_resumes_and_compensates(capsys: pytest.CaptureFixture[str]) -> None:
    assert await run_saga_demo(url="memory://saga-demo-test") == 0
    out = capsys.readouterr().out
    assert "ord-1: job succeeded; saga completed: charge done, reserve done, ship done" in out
    assert ("ord-2: job dead (saga-compensated); saga compensated: charge undone, "
            "reserve undone") in out
    assert "card charged 1 time(s) for ord-1 across the crash" in out
