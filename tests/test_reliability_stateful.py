"""A hypothesis state machine drives random sequences of every transition
(enqueue, claim, renew, ack, fail work|infra|dead, release, reap after a
forced expiry, cancel, replay, purge, retention expiry) through the scripts
and the App, keeps a model of what each job should be, and checks after every
step:

- every job id is in exactly one of ready / scheduled / leases / dead / done,
  the one its record's state names (or is gone: retention 0, expiry, purge);
- no set holds an id without a record, and payloads go with their records;
- the stats add up: ready + scheduled + leased + dead + retained = records,
  and the counters agree (dead, succeeded, enqueued);
- tokens never decrease, and a stale token is always refused; the holder's
  own token after its run ended is refused too, or answered as the call that
  ended the run was (an ack or a failure sent again after a lost reply: the
  same answer, the record as it is, nothing written, which the checks above
  hold after the step).

memory:// (fakeredis, same Lua) is fast and takes most examples; a shorter
run checks the real server."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from leasequeue import App
from leasequeue.errors import JobNotFound
from leasequeue.store.connection import _MEMORY_SERVERS
from leasequeue.store.record import parse_record, split_record
from tests.harness.redis_proc import RedisProcess
from tests.helpers import (
    DEFAULT_BUDGET,
    START_ALL,
    expire_lease,
    fail_job,
    make_due,
    new_claim_id,
    server_ms,
)

T = TypeVar("T")
Q = "default"
IDS = [f"j{i}" for i in range(6)]  # a small pool, so ids collide and get reused
LEASE_MS = 600_000  # nothing expires unless a rule forces it
RETAIN_MS = 600_000
SET_OF = {"queued": "ready", "scheduled": "scheduled", "leased": "leases", "dead": "dead",
          "succeeded": "done", "canceled": "done"}
_names = itertools.count()


@dataclass
class Model:
    """What one job should look like."""

    state: str
    max_attempts: int
    max_infra: int
    token: int = 0
    attempt: int = 0
    work_fail: int = 0
    infra_fail: int = 0
    cancel: bool = False
    due: bool = False  # scheduled and forced due: the next claim promotes it
    reason: str = ""


class QueueMachine(RuleBasedStateMachine):
    def __init__(self, url: str) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.prefix = f"hyp{next(_names)}"
        self.url = url if url != "memory://" else f"memory://{self.prefix}"
        self.app = App(self.url, prefix=self.prefix)
        self.qk = self.app.keys(Q)
        self.jobs: dict[str, Model] = {}
        self.succeeded = 0  # accepted acks
        self.enqueued = 0  # jobs created
        self.dead = 0  # the stats hash's dead counter, as the scripts should keep it

    def run(self, step: Callable[[], Awaitable[T]]) -> T:
        return self.loop.run_until_complete(step())

    def teardown(self) -> None:
        self.run(self.app.close)
        self.loop.close()
        _MEMORY_SERVERS.pop(self.prefix, None)

    # -- helpers --------------------------------------------------------------

    def ids_in(self, *states: str) -> list[str]:
        return sorted(i for i, m in self.jobs.items() if m.state in states)

    def token_for(self, job_id: str, stale: bool) -> int:
        """The holder's token, or one that was current once (or never was)."""
        token = self.jobs[job_id].token if job_id in self.jobs else 1
        return token - 1 if stale else token

    def is_current(self, job_id: str, token: int) -> bool:
        m = self.jobs.get(job_id)
        return m is not None and m.state == "leased" and m.token == token

    def bury(self, m: Model, reason: str) -> None:
        m.state, m.reason, m.cancel = "dead", reason, False
        self.dead += 1

    def requeue(self, m: Model, delay_ms: int) -> None:
        m.state, m.due = ("scheduled", False) if delay_ms > 0 else ("queued", False)

    # -- rules ----------------------------------------------------------------

    @rule(job_id=st.sampled_from(IDS), delayed=st.booleans(),
          max_attempts=st.integers(1, 3), max_infra=st.integers(1, 2))
    def enqueue(self, job_id: str, delayed: bool, max_attempts: int, max_infra: int) -> None:
        job = self.run(lambda: self.app.enqueue(
            "j", {"id": job_id}, queue=Q, job_id=job_id, delay=60 if delayed else 0,
            max_attempts=max_attempts, max_infra_attempts=max_infra))
        existing = self.jobs.get(job_id)
        if existing is not None:
            assert (job.created, job.state) == (False, existing.state)
            return
        assert job.created
        self.jobs[job_id] = Model("scheduled" if delayed else "queued", max_attempts, max_infra)
        self.enqueued += 1

    @rule(count=st.integers(1, 3))
    def claim(self, count: int) -> None:
        for m in self.jobs.values():
            if m.state == "scheduled" and m.due:  # promoted by the claim
                m.state, m.due = "queued", False
        claimable = set(self.ids_in("queued"))
        batch = self.run(lambda: self.app.scripts.claim(self.qk, count, LEASE_MS, "w",
                                                        START_ALL, new_claim_id()))
        got = [j.id for j in batch.jobs]
        assert len(got) == min(count, len(claimable)) and set(got) <= claimable, (got, claimable)
        for j in batch.jobs:
            m = self.jobs[j.id]
            # tokens come from the queue's counter: strictly increasing per job
            assert j.token > m.token and j.attempt == m.attempt + 1, (j, m)
            m.state, m.token, m.attempt = "leased", j.token, m.attempt + 1

    @precondition(lambda self: self.ids_in("scheduled"))
    @rule(data=st.data())
    def make_due(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(self.ids_in("scheduled")))
        self.run(lambda: make_due(self.app, Q, job_id))
        self.jobs[job_id].due = True

    @rule(job_id=st.sampled_from(IDS), stale=st.booleans())
    def renew(self, job_id: str, stale: bool) -> None:
        token = self.token_for(job_id, stale)
        answer = self.run(lambda: self.app.scripts.renew(self.qk, [(job_id, token)], LEASE_MS))
        if self.is_current(job_id, token):
            assert answer == [2 if self.jobs[job_id].cancel else 1]
        else:
            assert answer == [0], "a stale or unheld renewal was accepted"

    @rule(job_id=st.sampled_from(IDS), stale=st.booleans(),
          retention=st.sampled_from([0, RETAIN_MS]))
    def ack(self, job_id: str, stale: bool, retention: int) -> None:
        token = self.token_for(job_id, stale)
        answer = self.run(lambda: self.app.scripts.ack(
            self.qk, "succeeded", retention, [(job_id, token, b"\xa2ok", "")]))
        if not self.is_current(job_id, token):
            m = self.jobs.get(job_id)
            again = m is not None and m.token == token and m.state == "succeeded"
            # (the ack that ended its run, sent again: finished, nothing written)
            assert answer == [0] or (again and answer == [1]), (
                "a stale or unheld ack was accepted")
            return
        assert answer == [1]
        self.succeeded += 1
        if retention:
            m = self.jobs[job_id]
            m.state, m.cancel = "succeeded", False
        else:
            del self.jobs[job_id]

    @rule(job_id=st.sampled_from(IDS), stale=st.booleans(),
          kind=st.sampled_from(["work", "infra", "dead"]), delay_ms=st.sampled_from([0, 5000]))
    def fail(self, job_id: str, stale: bool, kind: str, delay_ms: int) -> None:
        token = self.token_for(job_id, stale)
        out = self.run(lambda: fail_job(self.app,
            self.qk, job_id, token, kind, "permanent", f"{kind} failure", delay_ms))
        if not self.is_current(job_id, token):
            m = self.jobs.get(job_id)
            if out.code != 0:  # the failure that ended its run, sent again
                assert m is not None and m.token == token and (out.code, out.state) in {
                    (1, "queued"), (1, "scheduled"), (2, "dead"), (3, "canceled")} and (
                    out.state, out.attempt, out.work_failures, out.infra_failures) == (
                    m.state, m.attempt, m.work_fail, m.infra_fail), (
                    "a stale or unheld failure was accepted")
            return
        m = self.jobs[job_id]
        reason = ""
        if kind == "work":
            m.work_fail += 1
            reason = "max-attempts" if m.attempt >= m.max_attempts else ""
        elif kind == "infra":
            m.infra_fail += 1
            m.attempt = max(0, m.attempt - 1)
            reason = "max-infra-attempts" if m.infra_fail >= m.max_infra else ""
        else:
            reason = "permanent"
        if m.cancel and not reason:
            m.state, m.cancel = "canceled", False
            expected = 3
        elif reason:
            self.bury(m, reason)
            expected = 2
        else:
            self.requeue(m, delay_ms)
            expected = 1
        assert (out.code, out.state, out.attempt, out.work_failures, out.infra_failures) == (
            expected, m.state, m.attempt, m.work_fail, m.infra_fail)

    @rule(job_id=st.sampled_from(IDS), stale=st.booleans())
    def release(self, job_id: str, stale: bool) -> None:
        token = self.token_for(job_id, stale)
        answer = self.run(lambda: self.app.scripts.release(self.qk, [(job_id, token)], 0, "t"))
        if not self.is_current(job_id, token):
            assert answer == [0], "a stale or unheld release was accepted"
            return
        m = self.jobs[job_id]
        m.attempt = max(0, m.attempt - 1)  # a release is no attempt
        if m.cancel:
            m.state, m.cancel = "canceled", False
            assert answer == [2]
        else:
            self.requeue(m, 0)
            assert answer == [1]

    @precondition(lambda self: self.ids_in("leased"))
    @rule(data=st.data())
    def reap_expired(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(self.ids_in("leased")))
        self.run(lambda: expire_lease(self.app, Q, job_id))
        out = self.run(lambda: self.app.scripts.reap(self.qk, 100, 0, 0, {}, DEFAULT_BUDGET))
        m = self.jobs[job_id]
        if m.cancel:
            m.state, m.cancel = "canceled", False
            expected = (0, 0, 1, 0)
        elif m.attempt >= m.max_attempts:
            self.bury(m, "lease-expired")
            expected = (0, 1, 0, 0)
        else:
            self.requeue(m, 0)
            expected = (1, 0, 0, 0)
        assert (out.requeued, out.dead, out.canceled, out.stale) == expected

    @rule()
    def maintenance_is_idempotent(self) -> None:
        """Reap and expire with nothing due change nothing (any worker runs them)."""
        out = self.run(lambda: self.app.scripts.reap(self.qk, 100, 0, 0, {}, DEFAULT_BUDGET))
        assert (out.requeued, out.dead, out.canceled, out.stale) == (0, 0, 0, 0)
        assert self.run(lambda: self.app.scripts.expire(self.qk, 100)) == 0

    @rule(job_id=st.sampled_from(IDS))
    def cancel(self, job_id: str) -> None:
        m = self.jobs.get(job_id)
        if m is None:
            with pytest.raises(JobNotFound):
                self.run(lambda: self.app.cancel(job_id, queue=Q))
            return
        status = self.run(lambda: self.app.cancel(job_id, queue=Q))
        if m.state in ("queued", "scheduled"):
            assert status == "canceled"
            m.state, m.due = "canceled", False
        elif m.state == "leased":
            assert status == "cancel-requested"
            m.cancel = True
        else:
            assert status == "final"

    @rule(job_id=st.sampled_from(IDS))
    def replay(self, job_id: str) -> None:
        n = self.run(lambda: self.app.replay([job_id], queue=Q))
        m = self.jobs.get(job_id)
        if m is None or m.state != "dead":
            assert n == 0
            return
        assert n == 1
        m.state, m.reason = "queued", ""
        m.attempt = m.work_fail = m.infra_fail = 0
        self.dead -= 1

    @rule()
    def purge(self) -> None:
        dead = self.ids_in("dead")
        assert self.run(lambda: self.app.purge_dead(Q)) == len(dead)
        for job_id in dead:
            del self.jobs[job_id]
        self.dead -= len(dead)

    @precondition(lambda self: self.ids_in("succeeded", "canceled"))
    @rule(data=st.data())
    def retention_runs_out(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(self.ids_in("succeeded", "canceled")))

        async def past_due() -> None:
            await self.app.redis.zadd(self.qk.done, {job_id: await server_ms(self.app) - 1},
                                      xx=True)

        self.run(past_due)
        assert self.run(lambda: self.app.scripts.expire(self.qk, 100)) == 1
        del self.jobs[job_id]

    # -- invariants -----------------------------------------------------------

    async def snapshot(self) -> dict[str, Any]:
        r, qk = self.app.redis, self.qk
        out: dict[str, Any] = {}
        members: Any
        for name in ("ready", "scheduled", "leases", "dead", "done"):
            members = await r.zrange(getattr(qk, name), 0, -1)
            out[name] = {x.decode() for x in members}
        raw: Any = await r.hgetall(qk.jobs)
        out["records"] = {k.decode(): parse_record(v) for k, v in raw.items()}
        # the line (priority 0): one entry of each queued job that is not in
        # the ready set is its home; the rest are stale (a canceled job's, kept
        # when its id is enqueued again or put back in the ready set), which
        # the stats hash counts
        line = [x.decode() for x in await r.lrange(qk.line, 0, -1)]
        live = {i for i in line if out["records"].get(i, {}).get("state") == "queued"
                and i not in out["ready"]}
        out["ready"] |= live
        out["line"] = (len(line), len(live), int(await r.hget(qk.stats, "line_stale") or 0))
        for name in ("payloads", "errors", "results"):
            members = await r.hkeys(getattr(qk, name))
            out[name] = {x.decode() for x in members}
        out["payloads"] |= {k.decode() for k, v in raw.items() if split_record(v)[1] is not None}
        out["stats"] = await self.app.stats(Q)
        return out

    @invariant()
    def redis_matches_the_model(self) -> None:
        snap = self.run(self.snapshot)
        records = snap["records"]
        assert set(records) == set(self.jobs), "a record is missing or left over"
        for job_id, rec in records.items():
            m = self.jobs[job_id]
            homes = [s for s in ("ready", "scheduled", "leases", "dead", "done")
                     if job_id in snap[s]]
            assert homes == [SET_OF[m.state]], (job_id, rec["state"], homes)
            assert (rec["state"], rec["token"], rec["attempt"], rec["work_fail"],
                    rec["infra_fail"], rec["cancel"] == 1) == (
                m.state, m.token, m.attempt, m.work_fail, m.infra_fail, m.cancel), (job_id, rec, m)
            if m.state == "dead":
                assert rec["reason"] == m.reason
        in_sets = set().union(*(snap[s] for s in ("ready", "scheduled", "leases", "dead", "done")))
        assert in_sets <= set(records), f"ids without a record: {in_sets - set(records)}"
        assert snap["payloads"] == set(records), "payloads without records, or records without"
        assert snap["errors"] <= set(records) and snap["results"] <= set(records)
        entries, live, stale = snap["line"]
        assert entries - stale == live, "the line's stale count is off"
        st_ = snap["stats"]
        assert st_.ready + st_.scheduled + st_.leased + st_.dead + st_.retained == len(records)
        counters = st_.counters
        assert counters.get("dead", 0) == self.dead == st_.dead
        assert counters.get("succeeded", 0) == self.succeeded
        assert counters.get("enqueued", 0) == self.enqueued


def run_machine(url: str, examples: int, steps: int) -> None:
    run_state_machine_as_test(
        lambda: QueueMachine(url),  # type: ignore[arg-type]
        settings=settings(max_examples=examples, stateful_step_count=steps, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow]),
    )


def test_state_machine_on_memory() -> None:
    run_machine("memory://", examples=60, steps=40)


def test_state_machine_on_redis(redis_server: RedisProcess) -> None:
    run_machine(redis_server.url, examples=12, steps=30)
