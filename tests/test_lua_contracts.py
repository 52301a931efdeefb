"""Lua files are contracts: the header of every script (KEYS, ARGV, the
repeated per-item group), its body, scripts.SPECS and the Python wrappers
must agree, so that one of them cannot drift alone. Linted with luacheck when
it is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from leasequeue import App
from leasequeue.models import NewJob
from leasequeue.store.keys import (
    BreakerKeys,
    LimiterKeys,
    QueueKeys,
    RateKeys,
    ResourceKeys,
    SchedulesKeys,
    breaker_keys,
    limit_keys,
    rate_keys,
    resource_keys,
    schedules_keys,
)
from leasequeue.store.loader import lib_chunks, lib_for, lua_dir, script_source
from leasequeue.store.record import RECORD_FIELDS, parse_record
from leasequeue.store.scripts import Scripts
from leasequeue.store.specs import REPLY_CODES, SPECS, AckReply

LUA = Path(__file__).resolve().parent.parent / "lua"
SCRIPTS = sorted(p.stem for p in LUA.glob("*.lua") if p.stem != "_lib")

KEY_LINE = re.compile(r"^-- KEYS\[(\d+)\]\s+(\w+)")
ARGV_LINE = re.compile(r"^-- ARGV\[(\d+)\]\s+(\w+)")
GROUP_LINE = re.compile(r"^-- ARGV\[(\d+)\.\.\]\s+(.*)")
NEXT_ENTRY = re.compile(r"^-- (KEYS|ARGV|Returns)")
GROUP_TEXT = re.compile(r"^per job(?: name)?, (\d+) values?: (.*)$")
RUNS_TEXT = re.compile(
    r"^runs of jobs alike, each a head of (\d+) values: (.*?), then (per job, .*)$")


@dataclass
class Header:
    keys: list[tuple[int, str]]
    argv: list[tuple[int, str]]
    group_start: int | None  # the n of ARGV[n..]
    group_text: str  # the group's description, continuation lines joined
    body: str  # the script without its header, comments stripped


def parse(path: Path) -> Header:
    lines = path.read_text().splitlines()
    n_header = next(i for i, line in enumerate(lines) if not line.startswith("--"))
    head = Header([], [], None, "", "")
    in_group = False
    for line in lines[:n_header]:
        if m := KEY_LINE.match(line):
            head.keys.append((int(m[1]), m[2]))
        elif m := ARGV_LINE.match(line):
            head.argv.append((int(m[1]), m[2]))
        elif m := GROUP_LINE.match(line):
            head.group_start, head.group_text, in_group = int(m[1]), m[2], True
            continue
        if in_group and not NEXT_ENTRY.match(line):
            head.group_text += " " + line.removeprefix("--").strip()
        else:
            in_group = False
    head.body = "\n".join(re.sub(r"--.*$", "", line) for line in lines[n_header:])
    return head


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_header_says_what_a_second_run_of_the_same_call_does(name: str) -> None:
    """The lane sends a call again, once, after its reply was lost
    (store/direct.py): each script's header says what that second run of
    the same call writes and answers (a ``-- Sent again`` paragraph), so a
    second run that would break a guarantee is seen where the script is
    written. A review took every script to be safe so; an audit that read
    each (2026-12-07) found a rate refund, a rate try, a limiter renew and,
    through its caller, App.rerun were not. A script that cannot say it
    must go once (Scripts.run's ``retry``)."""
    lines = (LUA / f"{name}.lua").read_text().splitlines()
    n_header = next(i for i, line in enumerate(lines) if not line.startswith("--"))
    assert any(line.startswith("-- Sent again") for line in lines[:n_header]), (
        f"{name}.lua: its header does not say what a second run of the same call does")


def group_names(text: str) -> tuple[str, ...]:
    """'per job, 2 values: id, token' -> ('id', 'token'); 'job ids' -> ('id',)."""
    text = re.sub(r"\([^)]*\)", "", text).strip()  # drop "(bytes, '' = none)" and the like
    if text == "job ids":
        return ("id",)
    if text == "holder ids":
        return ("holder",)
    m = GROUP_TEXT.match(text)
    assert m, f"cannot read the per-item group {text!r}"
    names = tuple(n.strip() for n in m[2].split(","))
    assert len(names) == int(m[1]), f"{text!r}: says {m[1]} values, lists {len(names)}"
    return names


def test_every_script_has_a_spec_and_every_spec_a_script() -> None:
    assert set(SCRIPTS) == set(SPECS)
    assert lua_dir() == LUA  # a source checkout reads the top-level lua/


@pytest.mark.parametrize("name", SCRIPTS)
def test_header_agrees_with_spec(name: str) -> None:
    head, spec = parse(LUA / f"{name}.lua"), SPECS[name]
    assert [i for i, _ in head.keys] == list(range(1, len(head.keys) + 1))
    assert tuple(k for _, k in head.keys) == spec.keys
    assert all(isinstance(getattr(QueueKeys, k, None), property) or k in LimiterKeys.__slots__
               or k in RateKeys.__slots__
               or isinstance(getattr(SchedulesKeys, k, None), property)
               or isinstance(getattr(BreakerKeys, k, None), property)
               or isinstance(getattr(ResourceKeys, k, None), property)
               or (k in spec.worker_keys and callable(getattr(QueueKeys, k, None)))
               for k in spec.keys)
    # the per-worker keys come last (the wrapper appends them)
    assert spec.keys[len(spec.keys) - len(spec.worker_keys):] == spec.worker_keys
    assert [i for i, _ in head.argv] == list(range(1, len(head.argv) + 1))
    assert tuple(a for _, a in head.argv) == spec.argv
    if spec.run_head:
        assert head.group_start == len(spec.argv) + 1
        runs = RUNS_TEXT.match(re.sub(r"\([^)]*\)", "", head.group_text).strip())
        assert runs, head.group_text
        names = tuple(n.strip() for n in runs[2].split(","))
        assert len(names) == int(runs[1]) and names == spec.run_head
        assert group_names(runs[3]) == spec.per_item
    elif spec.per_item:
        assert head.group_start == len(spec.argv) + 1
        assert group_names(head.group_text) == spec.per_item
    else:
        assert head.group_start is None


@pytest.mark.parametrize("name", SCRIPTS)
def test_body_uses_exactly_the_declared_keys_and_argv(name: str) -> None:
    head, spec = parse(LUA / f"{name}.lua"), SPECS[name]
    used_keys = {int(i) for i in re.findall(r"KEYS\[(\d+)\]", head.body)}
    assert used_keys == set(range(1, len(head.keys) + 1))
    used_argv = {int(i) for i in re.findall(r"ARGV\[(\d+)\]", head.body)}
    assert used_argv == set(range(1, len(spec.argv) + 1))
    if spec.run_head:
        # runs: a head of len(run_head) values, then count groups of per_item
        assert re.search(rf"local at = {len(spec.argv) + 1}\n", head.body)
        assert "while at <= #ARGV do" in head.body
        assert re.search(rf"local RUN_HEAD = {len(spec.run_head)}\n", head.body)
        offsets = [int(o) for o in re.findall(r"ARGV\[run \+ (\d+)\]", head.body)]
        assert max(offsets) == len(spec.run_head) - 1
        # a run steps by its (id, payload) pairs, or by one (its ids alone)
        # when its head's last value, the run's payload, is not empty
        steps = re.findall(r"(?:at|run) \+ RUN_HEAD \+ step \* count - 1, step do", head.body)
        assert len(steps) == 2
        assert re.search(rf"local step = ARGV\[at \+ {len(spec.run_head) - 1}\] == '' "
                         rf"and {len(spec.per_item)} or 1\n", head.body)
        assert spec.run_head[-1] == spec.per_item[-1] == "payload"
        pair = [int(o) for o in re.findall(r"ARGV\[i \+ (\d+)\]", head.body)]
        assert max(pair) == len(spec.per_item) - 1
        return
    loop = re.search(r"for (\w+) = (\d+), #ARGV(?:, (\w+))? do", head.body)
    if not spec.per_item:
        assert loop is None and "#ARGV" not in head.body
        return
    # the per-item loop starts right after the fixed ARGV and steps one group
    assert loop is not None
    assert int(loop[2]) == len(spec.argv) + 1
    step = loop[3] or "1"
    if not step.isdigit():
        const = re.search(rf"local {step} = (\d+)", head.body)
        assert const, f"cannot resolve the loop step {step}"
        step = const[1]
    assert int(step) == len(spec.per_item)
    offsets = [int(o) for o in re.findall(rf"ARGV\[{loop[1]} \+ (\d+)\]", head.body)]
    assert max(offsets, default=0) == len(spec.per_item) - 1


class Captured(Exception):
    def __init__(self, name: str, args: list[Any]) -> None:
        self.name, self.args_ = name, args


@pytest.mark.anyio
async def test_wrappers_pass_the_argv_count_the_spec_declares(
        prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two items per batched call: len(args) == fixed argv + 2 x per-item group."""
    async def capture(name: str, _qk: Any, args: Sequence[Any],
                      worker_keys: Sequence[str] = (), retry: bool = True) -> Any:
        assert len(worker_keys) == len(SPECS[name].worker_keys)
        raise Captured(name, list(args))

    async with App(f"memory://{prefix}", prefix=prefix) as app:
        s: Scripts = app.scripts
        monkeypatch.setattr(s, "run", capture)  # every call stops at the script boundary
        qk = app.keys("q")
        lk = limit_keys("lq:limiter", "job.j")
        sk = schedules_keys(prefix)
        bk = breaker_keys(prefix, "b")
        rk = resource_keys(prefix, "tmp", "k", "w")
        job = NewJob("a", "j", b"", 0, 0, 3, 10)
        calls = [
            s.enqueue(qk, [job, job]),
            # claim_line.lua first, claim.lua past its CLAIM_LINE_MAX
            s.claim(qk, 1, 1000, "w", 1, "c1"), s.claim(qk, 101, 1000, "w", 1, "c1"),
            s.start(qk, [("a", 1), ("b", 1)]),
            s.renew(qk, [("a", 1), ("b", 1)], 1000),
            s.ack(qk, "succeeded", 0, [("a", 1, b"", "", ""), ("b", 1, b"", "", "")]),
            s.fail(qk, "a", 1, "work", "", "e", 0, 3, 10),
            s.release(qk, [("a", 1), ("b", 1)], 0, "t"), s.wake(qk, [("a", 1), ("b", 1)]),
            s.reap(qk, 10, 0, 0, {"j": (3, 10), "k": (1, 1)}, (3, 10)), s.expire(qk, 10),
            s.cancel(qk, "a"),
            s.replay(qk, ["a", "b"]), s.purge(qk, 10), s.stats(qk),
            s.limiter_acquire(lk, "h", 1, 1000, False), s.limiter_renew(lk, ["h", "i"], 1000),
            s.limiter_release(lk, ["h", "i"]), s.queue_config(qk, 3), s.watch(qk, "a", 1000),
            s.schedule_upsert(sk, "n", "{}", 1, False), s.schedule_list(sk),
            s.schedule_fire(sk, "n", 1, 2, 1, 1000, "w"), s.schedule_done(sk, "n", 1),
            s.schedule_pause(sk, "n", True), s.schedule_trigger(sk, "n"),
            s.runstate(qk, "a", 1, "c", b"", 10),
            s.breaker_check(bk, "h", 1000, 1000),
            s.breaker_record(bk, "h", "failure", 5, 1000, 1000, 2000),
            s.breaker_force(bk, "open", 1000, "t"), s.breaker_state(bk, 1000),
            s.resource_open(rk, ("q", "a", 1), "w", "l", 1000),
            s.resource_claim(rk, ("q", "a", 1), "c", 1000), s.resource_clear(rk, ("q", "a", 1)),
            s.rate(rate_keys("lq:limiter", "r", "k"), ["h", "i"], 1000, 0, "take"),
        ]
        seen = set()
        for call in calls:
            with pytest.raises(Captured) as caught:
                await call
            spec = SPECS[caught.value.name]
            # (enqueue's two jobs alike are one run: one head)
            assert (len(caught.value.args_)
                    == len(spec.argv) + len(spec.run_head) + 2 * len(spec.per_item)), spec.name
            seen.add(spec.name)
        # enqueue_one.lua is only ever sent packed (scripts.OneJobCalls), on a
        # lane: tests/test_one_job_calls.py holds its bytes to its spec's ARGV
        assert seen == set(SPECS) - {"enqueue_one"}


# `local CODE_A = 1` and `local CODE_A, CODE_B = 0, 1` (numbers or quoted strings)
CODE_DECL = re.compile(r"^local ((?:CODE_\w+)(?:\s*,\s*CODE_\w+)*)\s*=\s*(.+)$", re.MULTILINE)
CODE_VALUE = re.compile(r"\s*(-?\d+|'[^']*')\s*")
# a bare literal where a reply value goes
BARE_REPLY = re.compile(
    r"reply\[#reply \+ 1\] = -?\d+\b"  # reply[#reply + 1] = 2
    r"|return \{\s*-?\d+\s*[,}]"  # return {0, ...
    r"|return -?\d+\s*$"  # return 0
    r"|\bcode = -?\d+\b",  # code = 2
    re.MULTILINE,
)


def declared_codes(body: str) -> dict[str, int | str]:
    codes: dict[str, int | str] = {}
    for m in CODE_DECL.finditer(body):
        names = [n.strip() for n in m[1].split(",")]
        values = [CODE_VALUE.fullmatch(v) for v in m[2].split(",")]
        assert len(names) == len(values) and all(values), f"cannot read {m[0]!r}"
        for n, v in zip(names, values, strict=True):
            assert v is not None
            text = v[1]
            codes[n.removeprefix("CODE_")] = text[1:-1] if text.startswith("'") else int(text)
    return codes


def bare_reply_literals(body: str) -> list[str]:
    return [m[0] for m in BARE_REPLY.finditer(body)]


@pytest.mark.parametrize("name", SCRIPTS)
def test_reply_codes_are_named_and_match_their_enum(name: str) -> None:
    """Every code a script replies with is a CODE_<NAME> local equal to the
    member of its enum in specs.REPLY_CODES, and no reply holds a bare literal."""
    body = parse(LUA / f"{name}.lua").body
    codes = declared_codes(body)
    enum = REPLY_CODES.get(name)
    if enum is None:
        assert codes == {}, f"{name} declares codes but has no enum in REPLY_CODES"
    else:
        assert codes == {m.name: m.value for m in enum}
    assert bare_reply_literals(body) == []


FIXTURE_BARE = """
local CODE_REFUSED, CODE_FINISHED = 0, 1
if ok then
  reply[#reply + 1] = CODE_FINISHED
else
  reply[#reply + 1] = 0
end
return {2, 'dead'}
"""


def test_the_bare_literal_check_catches_literals() -> None:
    assert declared_codes(FIXTURE_BARE) == {"REFUSED": 0, "FINISHED": 1}
    assert bare_reply_literals(FIXTURE_BARE) == ["reply[#reply + 1] = 0", "return {2,"]
    assert bare_reply_literals("  return 0\n  code = 3\n") == ["return 0", "code = 3"]
    assert bare_reply_literals("return {code, meta.state}\nreturn #ids\n") == []
    assert declared_codes("local CODE_A, CODE_B = 'a-b', -1\n") == {"A": "a-b", "B": -1}


def test_luacheck(tmp_path: Path) -> None:
    """Lint each script as Redis loads it (_lib.lua prepended); the helpers a
    script does not use are expected, every other warning is not."""
    luacheck = shutil.which("luacheck")
    if luacheck is None:
        pytest.skip("luacheck is not installed")
    lib = (LUA / "_lib.lua").read_text()
    helpers = re.findall(r"^local (?:function )?(\w+)", lib, flags=re.MULTILINE)
    for name in SCRIPTS:
        (tmp_path / f"{name}.lua").write_text(script_source(name))
    out = subprocess.run(
        [luacheck, "--no-config", "--std", "lua51", "--read-globals", "redis", "cjson", "KEYS",
         "ARGV", "--formatter", "plain", "--codes", "--ignore", *[f"211/{h}" for h in helpers],
         "--", *[f"{n}.lua" for n in SCRIPTS]],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_each_script_gets_the_helpers_it_uses_and_no_other() -> None:
    """The loader prepends the _lib.lua helpers a script calls, and the ones
    those call, in file order; a helper nothing calls is left out (Redis runs
    the whole text on every call)."""
    lib = (LUA / "_lib.lua").read_text()
    chunks = lib_chunks(lib)
    assert len(chunks) > 20 and "".join(text for _, text in chunks) in lib
    bury_src = lib_for("bury(meta, id, now, 'x', '', d, l, 1, s)", lib)
    assert "local function bury(" in bury_src and "local function int(" in bury_src
    assert "local function parse_schedule(" not in bury_src
    assert lib_for("return 1", lib) == ""
    words = re.compile(r"[A-Za-z_]\w*")
    for name in SCRIPTS:
        body = (LUA / f"{name}.lua").read_text()
        included = lib_for(body, lib)
        defined = {n for names, text in chunks if text in included for n in names}
        used = set(words.findall(re.sub(r"--[^\n]*", "", body + included)))
        # every helper the script or an included helper names is there ...
        for names, _ in chunks:
            if names & used:
                assert names <= defined, (name, names)
        # ... and nothing else
        assert defined <= used, (name, defined - used)


@pytest.mark.parametrize("state,ready_ms,due_ms,grp,expected", [
    ("queued", "1700000000000", "0", "", "4|-5|42|1700000000000|3|0|mail.send|"),
    ("scheduled", "0", "1700000005123", "", None),
    ("queued", "1700000000000", "0", "tenant:7", "4|-5|42|1700000000000|3|0|mail.send|tenant:7"),
    ("scheduled", "0", "1700000005123", "tenant:7", None)])
def test_new_record_is_what_encode_meta_writes(sync_redis: Any, state: str, ready_ms: str,
                                               due_ms: str, grp: str,
                                               expected: str | None) -> None:
    """enqueue.lua builds a new job's record around its seq
    (record_around_seq: head .. seq .. tail), not through encode_meta. A
    scheduled job's must be the text encode_meta writes (a park group makes
    it version 3); a queued job's is version 4, the fields a job as enqueued
    does not share with every other (its ready_ms is its enq_ms). parse_meta
    reads either back field by field."""
    lib = (LUA / "_lib.lua").read_text()
    snippet = f"""
local head, tail = record_around_seq('{state}', '3', '0', '-5', '1700000000000', '{ready_ms}',
                                     '{due_ms}', 'mail.send', '{grp}')
local built = head .. int(42) .. tail
local meta = {{state = '{state}', token = '0', attempt = '0', work_fail = '0', infra_fail = '0',
              max_attempts = '3', max_infra = '0', cancel = '0', started = '0', prio = '-5',
              seq = 42, enq_ms = '1700000000000', ready_ms = '{ready_ms}', due_ms = '{due_ms}',
              claim_ms = '0', end_ms = '0', name = 'mail.send', worker = '', reason = '',
              grp = '{grp}'}}
local parsed = parse_meta(built)
local same = 1
for field, value in pairs(meta) do
  if (parsed[field] or '') ~= tostring(value) then
    same = 0
  end
end
return {{built, encode_meta(meta), same}}
"""
    built, encoded, same = sync_redis.eval(lib_for(snippet, lib) + "\n" + snippet, 0)
    assert built == (expected.encode() if expected else encoded)
    assert same == 1
    assert parse_record(built) == parse_record(encoded)  # the Python reader agrees


@pytest.mark.parametrize("seconds, micros", [
    ("1700000000", "0"), ("1700000000", "5"), ("1700000000", "999"), ("1700000000", "1000"),
    ("1700000000", "45678"), ("1700000000", "123456"), ("1700000000", "999999"),
    ("1", "7000")])
def test_the_clock_as_text_is_what_now_ms_computes(sync_redis: Any, seconds: str,
                                                   micros: str) -> None:
    """enqueue.lua reads the server clock as text (ms_text: TIME's seconds,
    then the millisecond digits of its microseconds, no number between): the
    same instant now_ms computes, for every width of the microseconds."""
    lib = (LUA / "_lib.lua").read_text()
    snippet = f"""
local t = {{'{seconds}', '{micros}'}}
return {{ms_text(t), int(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))}}
"""
    as_text, computed = sync_redis.eval(lib_for(snippet, lib) + "\n" + snippet, 0)
    assert as_text == computed
    # and on the live clock, read once by each
    live = "return {ms_text(redis.call('TIME')), int(now_ms())}"
    first, second = (int(v) for v in sync_redis.eval(lib_for(live, lib) + "\n" + live, 0))
    assert 0 <= second - first <= 5


LEASED_RECORDS = [  # (record as stored, start now)
    ("2|queued|0|0|0|0|0|0|0|0|0|17|1700000000123|1700000000123|0|0|0|mail.send||", True),
    ("2|queued|0|0|0|0|0|0|0|0|0|17|1700000000123|1700000000123|0|0|0|mail.send||", False),
    # a job back from a failure: budgets, failures, a priority below 0, an old
    # token and claim, a cancel flag and a reason
    ("2|queued|41|2|1|1|5|3|1|0|-12|99|1700000000001|1700000009000|0|1700000008000|0|"
     "billing.charge|w-old|retry", True),
    ("2|queued|7|1|0|1|0|0|0|0|3|5|1700000000001|1700000000001|0|1700000000500|0|x|w9|", False),
    # version 3: a park group whose group is not parked
    ("3|queued|0|0|0|0|0|0|0|0|0|17|1700000000123|1700000000123|0|0|0|api.call|||tenant:7",
     True),
    # version 4, a job as enqueued: without a park group (leased as version 2), with
    # one (version 3), with budgets and a priority below 0
    ("4|0|17|1700000000123|0|0|mail.send|", True),
    ("4|0|17|1700000000123|0|0|mail.send|", False),
    ("4|-12|99|1700000000001|5|3|api.call|tenant:7", True),
]


# a payload kept inside the record, after a NUL, made of the record's separators
INLINE_PAYLOAD = "p|a\x00y|"


@pytest.mark.anyio
@pytest.mark.parametrize("inline", [False, True], ids=["payload-in-hash", "payload-inside"])
@pytest.mark.parametrize("raw, start_now", LEASED_RECORDS)
async def test_a_lease_writes_what_encode_meta_writes(real_app: App, sync_redis: Any, raw: str,
                                                      start_now: bool, inline: bool) -> None:
    """claim.lua leases a queued record of version 2 or 3 from its text
    (LEASE_PATTERN), not through parse_meta and encode_meta: the record it
    writes must be the one encode_meta writes for the same lease, field by
    field, and the claim's reply must carry the record's values and its
    payload, from inside the record or from the payloads hash."""
    qk = real_app.keys("default")
    envelope = b"\x94\x01\xa0\xa0\x80"
    if inline:
        raw += "|\x00" + INLINE_PAYLOAD
    else:
        await real_app.redis.hset(qk.payloads, "j", envelope)
    await real_app.redis.hset(qk.jobs, "j", raw)
    await real_app.redis.zadd(qk.ready, {"j": 1})
    batch = await real_app.scripts.claim(qk, 1, 30_000, "w-new", int(start_now), "c1")
    (job,) = batch.jobs
    assert job.payload == (INLINE_PAYLOAD.encode() if inline else envelope)
    stored = (await real_app.redis.hget(qk.jobs, "j")).decode()
    written = stored.split("|\x00", 1)[0]  # the fields
    lib = (LUA / "_lib.lua").read_text()
    snippet = """
local m = parse_meta(ARGV[1])
local leased = parse_meta(ARGV[2])
m.state, m.token, m.worker, m.claim_ms = 'leased', leased.token, 'w-new', leased.claim_ms
if ARGV[3] == '1' then
  m.started, m.attempt = '1', tonumber(m.attempt) + 1
else
  m.started = '0'
end
return encode_meta(m)
"""
    expected = sync_redis.eval(lib_for(snippet, lib) + "\n" + snippet, 0, raw, stored,
                               int(start_now)).decode()
    assert stored == expected
    assert stored == written + ("|\x00" + INLINE_PAYLOAD if inline else "")
    fields = dict(zip(("version", *RECORD_FIELDS), written.split("|"), strict=False))
    old_token = 0 if raw[0] == "4" else int(raw.split("|")[2])
    assert int(fields["token"]) == job.token > old_token
    assert (job.attempt, job.started) == (int(fields["attempt"]), start_now)
    assert (job.name, job.max_attempts, job.max_infra) == (
        fields["name"], int(fields["max_attempts"]), int(fields["max_infra"]))
    assert (job.work_failures, job.infra_failures, job.enqueued_ms) == (
        int(fields["work_fail"]), int(fields["infra_fail"]), int(fields["enq_ms"]))
    grouped = raw.split("|\x00", 1)[0].endswith("|tenant:7")
    # version 3 keeps its group; version 4 becomes 3 with a group, else 2
    assert written[0] == ("3" if grouped else "2" if raw[0] == "4" else raw[0])
    if grouped:
        assert written.endswith("|tenant:7")


FINISHED_RECORDS = [  # (a leased record as stored, the ack's outcome)
    ("2|leased|5|1|0|0|0|0|0|1|0|17|1700000000123|1700000000123|0|1700000000200|0|"
     "mail.send|w1|", "succeeded"),
    # leased ahead, never marked started: the ack counts its attempt
    ("2|leased|5|1|0|0|0|0|0|0|0|17|1700000000123|1700000000123|0|1700000000200|0|"
     "mail.send|w1|", "succeeded"),
    # budgets, failures, a priority below 0, a cancel request and a reason
    ("2|leased|41|3|2|1|5|3|1|1|-12|99|1700000000001|1700000009000|0|1700000009500|0|"
     "billing.charge|w1|retry", "canceled"),
    ("3|leased|5|1|0|0|0|0|0|1|0|17|1700000000123|1700000000123|0|1700000000200|0|"
     "api.call|w1||tenant:7", "skipped"),
]


@pytest.mark.anyio
@pytest.mark.parametrize("inline", [False, True], ids=["payload-in-hash", "payload-inside"])
@pytest.mark.parametrize("raw, outcome", FINISHED_RECORDS)
async def test_an_ack_writes_what_encode_meta_writes(real_app: App, sync_redis: Any, raw: str,
                                                     outcome: str, inline: bool) -> None:
    """ack.lua finishes a leased record of version 2 or 3 from its text
    (FINISH_PATTERN), not through parse_meta and encode_meta: the record it
    writes must be the one encode_meta writes for the same finish. A token
    other than the record's is refused and changes nothing. A payload inside
    the record stays there, whole."""
    qk = real_app.keys("default")
    token = int(raw.split("|")[2])
    if inline:
        raw += "|\x00" + INLINE_PAYLOAD
    await real_app.redis.hset(qk.jobs, "j", raw)
    await real_app.redis.zadd(qk.leases, {"j": 1})
    assert await real_app.scripts.ack(qk, outcome, 60_000, [("j", token + 1, b"", "")]) == [
        AckReply.REFUSED]
    assert (await real_app.redis.hget(qk.jobs, "j")).decode() == raw
    assert await real_app.scripts.ack(qk, outcome, 60_000, [("j", token, b"r", "")]) == [
        AckReply.FINISHED]
    written = (await real_app.redis.hget(qk.jobs, "j")).decode()
    lib = (LUA / "_lib.lua").read_text()
    snippet = """
local m = parse_meta(ARGV[1])
local finished = parse_meta(ARGV[2])
if m.started ~= '1' then
  m.attempt = tonumber(m.attempt) + 1
end
m.state, m.end_ms, m.cancel, m.started = ARGV[3], finished.end_ms, '0', '0'
return encode_meta(m)
"""
    expected = sync_redis.eval(lib_for(snippet, lib) + "\n" + snippet, 0, raw, written,
                               outcome).decode()
    assert written == expected
    assert written.endswith("|\x00" + INLINE_PAYLOAD) == inline
    assert await real_app.redis.hget(qk.results, "j") == b"r"
    assert await real_app.redis.zscore(qk.leases, "j") is None
    assert await real_app.redis.zscore(qk.done, "j") is not None
