"""App.jobs' pages: bounded reads of one state's set (or, for queued jobs,
the ready set and the line in claim order) after a cursor. Reads only; the
records are decoded by the caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .keys import QueueKeys
from .record import LINE_FLOOR, text

Row = tuple[str, float]  # (id, score); a line entry has no score (0.0)


@dataclass(frozen=True, slots=True)
class AfterEntry:
    """After this entry of a sorted set."""

    score: float
    member: str


@dataclass(frozen=True, slots=True)
class AfterLine:
    """From position ``start`` of the line, which follows the entry ``member``
    ('' at the line's start)."""

    start: int
    member: str


After = AfterEntry | AfterLine


def parse_cursor(cursor: str | None, shards: int) -> tuple[int, After | None]:
    """App.jobs' cursor: ``<shard>:`` (the start of a shard),
    ``<shard>:<score>:<id>`` (after that entry of a sorted set) or
    ``<shard>:L<position>:<id>`` (the line from that position, after that id)."""
    if cursor is None or cursor == "":
        return 0, None
    index, _, rest = cursor.partition(":")
    try:
        shard = int(index)
        if not 0 <= shard < shards:
            raise ValueError(index)
        if not rest:
            return shard, None
        where, sep, member = rest.partition(":")
        if not sep:
            raise ValueError(rest)
        if where.startswith("L"):
            start = int(where[1:])
            if start < 0:
                raise ValueError(where)
            return shard, AfterLine(start, member)
        return shard, AfterEntry(float(where), member)
    except ValueError:
        raise ConfigError(
            f"invalid cursor {cursor!r}: pass back the one App.jobs returned") from None


def cursor_text(after: After) -> str:
    """The part of a cursor after ``<shard>:`` (parse_cursor's inverse)."""
    if isinstance(after, AfterLine):
        return f"L{after.start}:{after.member}"
    return f"{after.score!r}:{after.member}"


async def page(redis: Any, key: str, after: After | None,
               count: int) -> list[Row]:
    """Up to ``count`` (id, score) entries of a ZSET after the cursor's
    entry: by its rank while it is still there, else from the first
    entry of a higher score (or of the same score and a higher id)."""
    start, exact = 0, True
    if isinstance(after, AfterEntry):
        async with redis.pipeline(transaction=False) as pipe:
            pipe.zrank(key, after.member)
            pipe.zscore(key, after.member)
            pipe.zcount(key, "-inf", f"({after.score!r}")
            rank, now_score, below = await pipe.execute()
        if rank is not None and now_score == after.score:
            start = int(rank) + 1
        else:
            start, exact = int(below), False
    raw: Any = await redis.zrange(key, start, start + count - 1, withscores=True)
    rows = [(text(m), float(sc)) for m, sc in raw]
    if isinstance(after, AfterEntry) and not exact:
        # the cursor's entry left the set: skip its equals in score up to it
        rows = [(m, sc) for m, sc in rows
                if sc > after.score or (sc == after.score and m > after.member)]
    return rows


def next_after(rows: list[Row], count: int) -> After | None:
    """Where the next page of a sorted set starts, None when this one ended it."""
    if len(rows) < count:
        return None
    member, score = rows[-1]
    return AfterEntry(score, member)


async def page_line(redis: Any, key: str, after: AfterLine,
                    count: int) -> tuple[list[Row], AfterLine]:
    """Up to ``count`` entries of the line from the cursor. Claims pop the
    line's front, so the cursor's entry only moves toward it: when it is no
    longer at its position it is looked for before it (LPOS bounded by the
    position), and when it is gone, so is every entry that was ahead of it,
    and the page starts at the front."""
    start = after.start
    if after.member and start > 0:  # (LPOS's MAXLEN 0 would mean the whole line)
        here = await redis.lindex(key, start - 1)
        if here is None or text(here) != after.member:
            found = await redis.lpos(key, after.member, maxlen=start)
            start = int(found) + 1 if found is not None else 0
    raw: Any = await redis.lrange(key, start, start + count - 1)
    ids = [text(x) for x in raw]
    return [(i, 0.0) for i in ids], AfterLine(start + len(ids), ids[-1] if ids else after.member)


async def queued_page(redis: Any, qk: QueueKeys, after: After | None,
                      count: int) -> tuple[list[Row], After | None]:
    """Up to ``count`` queued ids in claim order (lua/_lib.lua, LINE_FLOOR):
    the ready set below LINE_FLOOR, the line, the ready set's rest; and where
    the next page starts (None: this one reached the end). An id may be a
    stale entry of the line (a job canceled there): the caller keeps the
    records that are queued."""
    rows: list[Row] = []
    if after is None or (isinstance(after, AfterEntry) and after.score < LINE_FLOOR):
        got = [r for r in await page(redis, qk.ready, after, count) if r[1] < LINE_FLOOR]
        rows += got
        nxt = next_after(got, count)
        if nxt is not None:
            return rows, nxt
        after = AfterLine(0, "")
    if isinstance(after, AfterLine):
        got, at = await page_line(redis, qk.line, after, count - len(rows))
        rows += got
        if len(rows) == count:
            return rows, at
        after = AfterEntry(LINE_FLOOR, "")  # every entry from the floor on
    want = count - len(rows)
    got = await page(redis, qk.ready, after, want)
    return rows + got, next_after(got, want)
