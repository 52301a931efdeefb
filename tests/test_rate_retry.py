"""A rate refund (lua/rate.lua, mode refund) is sent once: one whose reply
was lost after it ran, sent again, would give each start back twice, and
the key would let one more start in than its rate. A take sent again
after a lost reply spends a start more, the safe side (never one more
start than the rate), and is still retried. Found by a review
(2026-12-07): every script was retried once on a dropped connection."""

from __future__ import annotations

from typing import Any

import pytest

from leasequeue import App
from leasequeue.errors import RedisUnavailable
from leasequeue.store import direct
from leasequeue.store.keys import rate_keys
from tests.harness.redis_proc import RedisProcess

pytestmark = pytest.mark.anyio

SECOND = 1_000_000  # one start a second, a burst of 3: three starts allowed now
INTERVAL, TOLERANCE = SECOND, 2 * SECOND


def _reply_lost_once(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The next reply the lane reads comes in, and its connection drops
    with it (the script ran; its caller never learns so)."""
    real_read = direct._read
    lost: list[Any] = []

    async def read(conn: Any, wait: float = 0.0) -> Any:
        reply = await real_read(conn, wait)
        if not lost:
            lost.append(reply)
            raise direct.RedisConnectionError("Connection reset by peer")
        return reply

    monkeypatch.setattr(direct, "_read", read)
    return lost


async def test_a_refund_whose_reply_was_lost_gives_its_start_back_once(
        redis_server: RedisProcess, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    app = App(redis_server.url, prefix=prefix)
    scripts = app.scripts
    rk = rate_keys(f"{prefix}:lim", "api")
    try:
        taken = await scripts.rate(rk, ["job-1", "job-2"], INTERVAL, TOLERANCE, "take")
        assert [code for code, _ in taken.answers] == [1, 1] and taken.tokens == 1
        lost = _reply_lost_once(monkeypatch)
        with pytest.raises(RedisUnavailable):  # not sent again: the caller is told
            await scripts.rate(rk, ["job-1"], INTERVAL, TOLERANCE, "refund")
        monkeypatch.undo()
        assert lost  # it ran, and its reply was lost
        after = await scripts.rate(rk, [], INTERVAL, TOLERANCE, "peek")
        assert after.tokens == 2  # one start back, not two
    finally:
        await app.close()


async def test_a_take_whose_reply_was_lost_is_sent_again_and_errs_on_the_safe_side(
        redis_server: RedisProcess, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    app = App(redis_server.url, prefix=prefix)
    scripts = app.scripts
    rk = rate_keys(f"{prefix}:lim", "api")
    try:
        lost = _reply_lost_once(monkeypatch)
        answer = await scripts.rate(rk, ["job-1"], INTERVAL, TOLERANCE, "take")
        monkeypatch.undo()
        assert lost and [code for code, _ in answer.answers] == [1]  # answered, once
        after = await scripts.rate(rk, [], INTERVAL, TOLERANCE, "peek")
        assert after.tokens == 1  # two starts spent for one: fewer, never more, than the rate
    finally:
        await app.close()
