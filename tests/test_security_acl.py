"""Least-privilege ACL users (leasequeue/acl.py, SECURITY.md) against a real
Redis 7: each role's allowed operations work, each forbidden one raises
PermissionDenied naming what Redis refused, and a refused script changes
nothing. Also the facts of Redis 7 the roles are built on."""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync

from leasequeue import (
    App,
    Context,
    JobNotFound,
    PermanentError,
    PermissionDenied,
    RedisLimiter,
    Worker,
)
from leasequeue.acl import Role, acl_rules, acl_setuser, role_commands, script_commands
from leasequeue.errors import ScriptError
from leasequeue.models import NewJob
from leasequeue.store.keys import (
    QueueKeys,
    breaker_keys,
    default_limiter_prefix,
    limit_keys,
    rate_keys,
    resource_keys,
    schedules_keys,
)
from leasequeue.store.loader import script_source
from leasequeue.store.specs import SPECS
from tests.harness.redis_proc import RedisProcess, env_with_path
from tests.helpers import eventually, ready_ids_sync, worker_running

pytestmark = pytest.mark.anyio

Q = "emails"
OTHER = "billing"
PASSWORD = "s3cret-pw"
_users = itertools.count()


def make_user(admin: redis_sync.Redis, role: Role, prefix: str,
              queues: tuple[str, ...] = ()) -> str:
    """Create an ACL user for ``role`` from the generated rules; its name."""
    user = f"{role.value}-{prefix}-{next(_users)}"
    admin.execute_command("ACL", "SETUSER", user,
                          *acl_rules(role, prefix, queues, password=PASSWORD))
    return user


def url_of(server: RedisProcess, user: str) -> str:
    return f"redis://{user}:{PASSWORD}@127.0.0.1:{server.port}/0"


@pytest.fixture
def admin(redis_server: RedisProcess) -> Iterator[redis_sync.Redis]:
    client = redis_sync.Redis(port=redis_server.port)
    yield client
    client.close()


AppFactory = Callable[[Role, tuple[str, ...]], App]


@pytest.fixture
async def role_app(redis_server: RedisProcess, admin: redis_sync.Redis,
                   prefix: str) -> AsyncIterator[AppFactory]:
    """Apps on the test's prefix, each logged in as a new user of a role."""
    apps: list[App] = []

    def build(role: Role, queues: tuple[str, ...] = ()) -> App:
        app = App(url_of(redis_server, make_user(admin, role, prefix, queues)), prefix=prefix)
        apps.append(app)
        return app

    yield build
    for app in apps:
        await app.close()


def register(app: App) -> list[int]:
    ran: list[int] = []

    @app.job(queue=Q, max_attempts=1)
    async def send(ctx: Context, i: int) -> int:
        if i < 0:
            raise PermanentError("poison")
        ran.append(i)
        return i * 2

    return ran


async def _state(app: App, job_id: str, state: str) -> bool:
    return (await app.get_job(job_id, Q)).state == state


def assert_denied(exc: pytest.ExceptionInfo[PermissionDenied], *needles: str) -> None:
    text = str(exc.value)
    assert "permission denied by the Redis ACL" in text, text
    for needle in needles:
        assert needle in text, (needle, text)
    assert PASSWORD not in text


# -- the facts of Redis 7 the design rests on ----------------------------------


def test_redis_checks_declared_keys_up_front_and_every_call_inside(
        redis_server: RedisProcess, admin: redis_sync.Redis, prefix: str) -> None:
    """EVALSHA needs read+write on every declared key (even a no-writes
    script), EVALSHA_RO read only; a redis.call inside a script is checked
    against the caller's key patterns and commands, so an undeclared write
    is refused mid-script, after the writes before it (no rollback)."""
    user = f"facts-{prefix}"
    admin.execute_command("ACL", "SETUSER", user, "reset", "on", f">{PASSWORD}",
                          "%RW~w:*", "%R~r:*", "-@all", "+evalsha", "+evalsha_ro",
                          "+script|load", "+get", "+set")
    c = redis_sync.Redis(port=redis_server.port, username=user, password=PASSWORD)
    try:
        read = c.script_load("#!lua flags=no-writes\nreturn redis.call('GET', KEYS[1])")
        with pytest.raises(redis_sync.exceptions.NoPermissionError, match="keys"):
            c.evalsha(read, 1, "r:1")
        assert c.evalsha_ro(read, 1, "r:1") is None
        sneaky = c.script_load("redis.call('SET', KEYS[1], 'x'); "
                               "redis.call('SET', 'r:1', 'y'); return 1")
        with pytest.raises(redis_sync.exceptions.ResponseError, match="can't access"):
            c.evalsha(sneaky, 1, "w:1")
        assert admin.get("w:1") == b"x" and admin.get("r:1") is None
        flush = c.script_load("return redis.call('FLUSHALL')")
        with pytest.raises(redis_sync.exceptions.ResponseError, match="can't run this command"):
            c.evalsha(flush, 0)
        with pytest.raises(redis_sync.exceptions.NoPermissionError):
            c.script_flush()
    finally:
        c.close()
        admin.delete("w:1")


# -- producer --------------------------------------------------------------


async def test_producer_enqueues_and_reads_but_cannot_claim_ack_or_purge(
        role_app: AppFactory, admin: redis_sync.Redis) -> None:
    producer = role_app(Role.PRODUCER, (Q,))
    job = await producer.enqueue("send", {"i": 1}, queue=Q, job_id="p1")
    assert job.created
    assert (await producer.get_job("p1", Q)).state == "queued"
    assert (await producer.stats(Q)).ready == 1
    before = ready_ids_sync(admin, producer.keys(Q))

    with pytest.raises(PermissionDenied) as claim:
        await producer.scripts.claim(producer.keys(Q), 10, 30_000, "intruder", 10, "c1")
    assert_denied(claim, "claim", producer.keys(Q).leases)
    with pytest.raises(PermissionDenied) as ack:
        await producer.scripts.ack(producer.keys(Q), "succeeded", 60_000, [("p1", 1, b"", "")])
    assert_denied(ack, producer.keys(Q).results)
    with pytest.raises(PermissionDenied) as purge:
        await producer.purge_dead(Q)
    assert_denied(purge, "purge", producer.keys(Q).dead)
    with pytest.raises(PermissionDenied):
        await producer.replay(["p1"], queue=Q)
    with pytest.raises(PermissionDenied):
        await producer.cancel("p1", Q)
    with pytest.raises(PermissionDenied) as pause:
        await producer.pause(Q)
    assert_denied(pause)
    # refused before anything ran: the job is where it was
    assert ready_ids_sync(admin, producer.keys(Q)) == before == ["p1"]
    assert (await producer.get_job("p1", Q)).state == "queued"


async def test_producer_limited_to_its_queues(role_app: AppFactory) -> None:
    producer = role_app(Role.PRODUCER, (Q,))
    with pytest.raises(PermissionDenied) as exc:
        await producer.enqueue("send", {"i": 1}, queue=OTHER)
    assert_denied(exc, f"{{{producer.prefix}:{OTHER}}}:config")


# -- worker ----------------------------------------------------------------


async def test_worker_runs_jobs_on_its_queues_and_operator_replays_and_purges(
        role_app: AppFactory) -> None:
    producer = role_app(Role.PRODUCER, (Q,))
    worker_app = role_app(Role.WORKER, (Q,))
    ran = register(worker_app)
    await producer.enqueue("send", {"i": 3}, queue=Q, job_id="ok")
    await producer.enqueue("send", {"i": -1}, queue=Q, job_id="poison")
    async with worker_running(worker_app, queues=[Q]):
        await eventually(lambda: _state(producer, "ok", "succeeded"), what="ok to succeed")
        await eventually(lambda: _state(producer, "poison", "dead"), what="poison to be dead")
        assert await producer.wait("ok", timeout=5, queue=Q) == 6  # the producer waits for its jobs
    assert ran == [3]

    operator = role_app(Role.OPERATOR, ())
    assert len(await operator.dead_letters(Q)) == 1
    assert [r.id for r in (await operator.jobs(Q, "dead"))[0]] == ["poison"]
    await operator.pause(Q)
    assert await operator.paused(Q)
    await operator.resume(Q)
    assert await operator.replay(["poison"], queue=Q) == 1
    assert (await operator.get_job("poison", Q)).state == "queued"
    await operator.cancel("poison", Q)
    await producer.enqueue("send", {"i": -1}, queue=Q, job_id="poison2")
    async with worker_running(worker_app, queues=[Q]):
        await eventually(lambda: _state(operator, "poison2", "dead"), what="poison2 dead")
    assert await operator.purge_dead(Q) == 1


async def test_worker_runs_schedules_and_the_redis_limiter(redis_server: RedisProcess,
                                                            admin: redis_sync.Redis,
                                                            prefix: str) -> None:
    """The worker role covers the schedules and the Redis limiter under the
    default limiter prefix (P:limiter)."""
    url = url_of(redis_server, make_user(admin, Role.WORKER, prefix, (Q,)))
    app = App(url, prefix=prefix, limiter=RedisLimiter())
    ran: list[str] = []

    @app.job(queue=Q, max_concurrent=1)
    async def limited(ctx: Context) -> None:
        ran.append(ctx.job_id)

    app.schedule("tick", "limited", every=timedelta(seconds=1), queue=Q)
    try:
        await app.enqueue("limited", job_id="l1")
        async with worker_running(app, queues=[Q]):
            await eventually(lambda: "l1" in ran and any(r.startswith("schedule:tick:")
                                                          for r in ran),
                             what="the limited job and a schedule fire")
        assert admin.exists(f"{{{prefix}:limiter:job.limited}}") == 0  # slot given back
        assert admin.hexists(f"{{{prefix}}}:schedules:specs", "tick")
    finally:
        await app.close()


async def test_worker_cannot_touch_other_queues(role_app: AppFactory) -> None:
    worker_app = role_app(Role.WORKER, (Q,))
    with pytest.raises(PermissionDenied) as exc:
        await worker_app.enqueue("send", {"i": 1}, queue=OTHER)
    assert_denied(exc, OTHER)
    with pytest.raises(PermissionDenied) as claim:
        await worker_app.scripts.claim(worker_app.keys(OTHER), 1, 30_000, "w", 1, "c1")
    assert_denied(claim, f"{{{worker_app.prefix}:{OTHER}}}:leases")
    # a worker started on a queue it may not touch stops at boot, typed
    # (queue_config: the first script of its boot)
    with pytest.raises(PermissionDenied, match="queue_config") as boot:
        await Worker(worker_app, queues=[OTHER], shutdown_timeout=1).run()
    assert_denied(boot, f"{{{worker_app.prefix}:{OTHER}}}:config")


def test_a_scripts_commands_include_what_it_sends_through_bulk() -> None:
    """claim.lua sends LPUSH only through _lib.lua's bulk() (its park path,
    which puts the next job back at the front of the line): the generator
    reads each script's bulk() calls as it reads its redis.call()s."""
    assert "lpush" in script_commands(["claim"])
    for name in SPECS:
        sent = {m.lower() for m in re.findall(r"bulk\(\s*'([A-Za-z]+)'", script_source(name))}
        assert sent <= set(script_commands([name])), name


async def test_a_worker_claims_past_a_parked_group_under_its_role(
        role_app: AppFactory, admin: redis_sync.Redis) -> None:
    """claim.lua's park path puts the first job it does not park back at the
    front of the line with _lib.lua's bulk('LPUSH', ...): the role's commands
    are read from bulk() calls too (before, the worker role had no LPUSH and
    this claim was refused). A job of a parked group, then a plain one: the
    claim parks the first and puts the second back, and the next claim
    leases it."""
    worker_app = role_app(Role.WORKER, (Q,))
    qk = worker_app.keys(Q)
    far = (int(admin.time()[0]) + 3600) * 1_000_000
    admin.hset(qk.parked, "rate.t:A", f"{far}|1000000")
    await worker_app.scripts.enqueue(qk, [NewJob("grouped", "send", b"x", 0, 0, 1, 5,
                                                 grp="rate.t:A")])
    await worker_app.scripts.enqueue(qk, [NewJob("plain", "send", b"x", 0, 0, 1, 5)])
    first = await worker_app.scripts.claim(qk, 1, 30_000, "w", 0, "c1")
    assert [j.id for j in first.jobs] == [] and first.next_due_in_ms == 0
    assert admin.lrange(qk.line, 0, -1) == [b"plain"]
    assert admin.zscore(qk.scheduled, "grouped") is not None
    second = await worker_app.scripts.claim(qk, 1, 30_000, "w", 0, "c2")
    assert [j.id for j in second.jobs] == ["plain"]


# -- viewer (the operator's read-only variant) ------------------------------


async def test_viewer_reads_everything_and_changes_nothing(role_app: AppFactory) -> None:
    producer = role_app(Role.PRODUCER, (Q,))
    await producer.enqueue("send", {"i": 1}, queue=Q, job_id="v1")
    viewer = role_app(Role.VIEWER, ())
    assert (await viewer.get_job("v1", Q)).payload == {"i": 1}
    assert (await viewer.stats(Q)).ready == 1
    assert [r.id for r in (await viewer.jobs(Q, "ready"))[0]] == ["v1"]
    assert await viewer.dead_letters(Q) == []
    assert not await viewer.paused(Q)
    assert (await viewer.schedules.list())[1] == []
    for refused in (viewer.enqueue("send", {"i": 2}, queue=Q), viewer.purge_dead(Q),
                    viewer.replay(["v1"], queue=Q), viewer.cancel("v1", Q), viewer.pause(Q)):
        with pytest.raises(PermissionDenied) as exc:
            await refused
        assert_denied(exc)
    assert (await producer.get_job("v1", Q)).state == "queued"


# -- tenants ---------------------------------------------------------------


async def test_tenants_by_prefix_cannot_see_or_change_each_other(
        redis_server: RedisProcess, admin: redis_sync.Redis, prefix: str) -> None:
    a_prefix, b_prefix = f"{prefix}a", f"{prefix}b"
    a = App(url_of(redis_server, make_user(admin, Role.OPERATOR, a_prefix)), prefix=a_prefix)
    b = App(url_of(redis_server, make_user(admin, Role.OPERATOR, b_prefix)), prefix=b_prefix)
    # tenant a's App pointed at b's prefix, still logged in as a's user
    a_on_b = App(a.url, prefix=b_prefix)
    try:
        await a.enqueue("send", {"i": 1}, queue=Q, job_id="shared-id")
        await b.enqueue("send", {"i": 2}, queue=Q, job_id="shared-id")
        assert (await a.get_job("shared-id", Q)).payload == {"i": 1}
        assert (await b.get_job("shared-id", Q)).payload == {"i": 2}
        for refused in (a_on_b.get_job("shared-id", Q), a_on_b.stats(Q),
                        a_on_b.enqueue("send", {"i": 3}, queue=Q), a_on_b.purge_dead(Q),
                        a_on_b.cancel("shared-id", Q)):
            with pytest.raises(PermissionDenied):
                await refused
        assert (await b.get_job("shared-id", Q)).state == "queued"
        await a.cancel("shared-id", Q)
        assert (await b.get_job("shared-id", Q)).state == "queued"
        with pytest.raises(JobNotFound):
            await a.get_job("only-in-b", Q)
    finally:
        for app in (a, b, a_on_b):
            await app.close()


# -- every script, every role -------------------------------------------------

READ_ONLY_SCRIPTS = {"stats", "schedule_list", "schedule_trigger"}
ALLOWED: dict[Role, set[str]] = {
    Role.PRODUCER: {"enqueue", "enqueue_one", "queue_config", "watch", "stats"},
    # a worker must write every key of its queues, so it may run every
    # queue script there (SECURITY.md: what ACLs cannot enforce)
    Role.WORKER: set(SPECS),
    Role.OPERATOR: set(SPECS),
    Role.VIEWER: READ_ONLY_SCRIPTS,
}


def _probe_keys(app: App, name: str, queue: str) -> Any:
    keys = SPECS[name].keys
    if "failures" in keys or "index" in keys:  # a circuit breaker's
        return breaker_keys(default_limiter_prefix(app.prefix), "probe")
    if "entry" in keys:  # the resource ledger's
        return resource_keys(app.prefix, "probe", "key", "w")
    if "reserved" in keys:  # a rate limit's
        return rate_keys(default_limiter_prefix(app.prefix), "probe", "k")
    if "limit" in keys:
        return limit_keys(default_limiter_prefix(app.prefix), "probe")
    if "specs" in keys or "state" in keys:
        return schedules_keys(app.prefix)
    return app.keys(queue)


@pytest.mark.parametrize("role", list(Role))
async def test_every_script_is_allowed_or_refused_as_the_role_says(
        role_app: AppFactory, role: Role) -> None:
    """Each script, with no arguments (Redis checks its keys before it runs),
    on the role's queue and on another queue: PermissionDenied exactly where
    the role may not go; elsewhere at most the script's own complaint about
    its missing arguments."""
    app = role_app(role, (Q,) if role in (Role.PRODUCER, Role.WORKER) else ())
    for queue in (Q, OTHER):
        for name in sorted(SPECS):
            keys = _probe_keys(app, name, queue)
            per_queue = isinstance(keys, QueueKeys)
            allowed = name in ALLOWED[role] and (
                queue == Q or not per_queue or role in (Role.OPERATOR, Role.VIEWER))
            worker_keys = [keys.claim("probe")] if SPECS[name].worker_keys else []
            try:
                await app.scripts.run(name, keys, [], worker_keys)
            except PermissionDenied as exc:
                assert not allowed, (role, name, queue, str(exc))
                continue
            except ScriptError:  # the script ran and refused the empty arguments
                pass
            assert allowed, (role, name, queue, "was not refused")


# -- the generator and the CLI ----------------------------------------------


def test_cli_prints_a_line_that_redis_accepts(redis_server: RedisProcess,
                                              admin: redis_sync.Redis, prefix: str) -> None:
    env = env_with_path()
    env["LQ_ACL_PASSWORD"] = PASSWORD
    out = subprocess.run([sys.executable, "-m", "leasequeue.cli", "acl", "--role", "worker",
                          "--prefix", prefix, "--queue", Q, "--user", f"cli-{prefix}"],
                         env=env, capture_output=True, text=True, timeout=60, check=True)
    line = out.stdout.strip()
    assert PASSWORD not in out.stdout + out.stderr  # only its SHA-256
    assert line.startswith(f"ACL SETUSER cli-{prefix} ")
    assert admin.execute_command(*shlex.split(line)) == b"OK"
    rules = admin.execute_command("ACL", "GETUSER", f"cli-{prefix}")
    assert f"~{{{prefix}:{Q}}}:* ".encode() in rules[b"keys"]
    assert line == acl_setuser(f"cli-{prefix}", "worker", prefix, (Q,), password=PASSWORD)


def test_cli_with_a_wrong_role_prints_a_clear_error(redis_server: RedisProcess,
                                                    admin: redis_sync.Redis,
                                                    prefix: str) -> None:
    user = make_user(admin, Role.VIEWER, prefix)
    admin.sadd(f"{{{prefix}}}:queues", Q)  # the queue exists
    out = subprocess.run([sys.executable, "-m", "leasequeue.cli", "queues", "pause", Q,
                          "--url", url_of(redis_server, user), "--prefix", prefix],
                         env=env_with_path(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out
    assert out.stderr.startswith("error: "), out.stderr
    assert "permission denied by the Redis ACL" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert PASSWORD not in out.stdout + out.stderr


@pytest.mark.parametrize("role", [Role.PRODUCER, Role.VIEWER])
async def test_a_worker_with_a_role_that_cannot_work_stops_at_boot(
        role_app: AppFactory, role: Role) -> None:
    app = role_app(role, (Q,) if role is Role.PRODUCER else ())
    register(app)
    with pytest.raises(PermissionDenied) as boot:
        await Worker(app, queues=[Q], shutdown_timeout=1).run()
    # a producer passes the shard check (it enqueues) and is stopped by the
    # access check, on its keys; a viewer already by the shard check, whose
    # EVALSHA it may not send at all
    assert_denied(boot, f"start: permission denied by the Redis ACL: this user has no "
                        f"permissions to access one of the keys used as arguments; start "
                        f"declares the keys {{{app.prefix}:{Q}}}:leases"
                  if role is Role.PRODUCER else
                  "queue_config: permission denied by the Redis ACL: this user has no "
                  "permissions to run the 'evalsha' command")


def test_cli_worker_with_a_producer_user_exits_with_one_line(
        redis_server: RedisProcess, admin: redis_sync.Redis, prefix: str,
        tmp_path: Path) -> None:
    user = make_user(admin, Role.PRODUCER, prefix, (Q,))
    (tmp_path / "acl_app.py").write_text(
        "import os\nfrom leasequeue import App, Context\n"
        "app = App(os.environ['LQ_URL'], prefix=os.environ['LQ_PREFIX'])\n"
        f"@app.job(queue={Q!r})\nasync def send(ctx: Context) -> None: ...\n")
    env = env_with_path()
    env.update(LQ_URL=url_of(redis_server, user), LQ_PREFIX=prefix)
    out = subprocess.run([sys.executable, "-m", "leasequeue.cli", "worker", "acl_app:app",
                          "--queue", Q], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 1, out
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: start: permission denied by the Redis ACL"), out.stderr
    assert f"{{{prefix}:{Q}}}:leases" in last
    assert "Traceback" not in out.stderr and PASSWORD not in out.stderr + out.stdout


@pytest.mark.parametrize("role", list(Role))
def test_every_role_line_is_accepted_by_redis_also_for_a_cluster(
        admin: redis_sync.Redis, prefix: str, role: Role) -> None:
    queues = (Q, OTHER) if role in (Role.PRODUCER, Role.WORKER) else ()
    for cluster in (False, True):
        line = acl_setuser(f"{role}-{prefix}-{cluster}", role, prefix, queues,
                           limiter_prefix="shared", password=PASSWORD, cluster=cluster)
        assert admin.execute_command(*shlex.split(line)) == b"OK"


def test_roles_are_nested_where_they_should_be() -> None:
    viewer, operator = set(role_commands(Role.VIEWER)), set(role_commands(Role.OPERATOR))
    assert viewer < operator
    assert not viewer & {"set", "del", "hset", "zadd", "xadd", "evalsha"}
    for role in Role:  # never the dangerous ones
        assert not set(role_commands(role)) & {"eval", "script|flush", "script|kill",
                                               "flushall", "flushdb", "config|get",
                                               "config|set", "keys", "acl|setuser"}


def test_unknown_role_and_queues_for_operator_are_config_errors() -> None:
    from leasequeue import ConfigError

    with pytest.raises(ConfigError, match="unknown role"):
        acl_rules("admin", "p")
    with pytest.raises(ConfigError, match="every queue"):
        acl_rules(Role.OPERATOR, "p", ("q",))




def test_security_md_lines_are_the_generators() -> None:
    """The ACL SETUSER lines SECURITY.md quotes are what the generator prints."""
    doc = (Path(__file__).resolve().parent.parent / "SECURITY.md").read_text()
    quoted = [line for line in doc.splitlines() if line.startswith("ACL SETUSER myapp-")]
    expected = [acl_setuser(f"myapp-{role}", role, "myapp",
                            (Q,) if role in (Role.PRODUCER, Role.WORKER) else ())
                for role in Role]
    assert quoted == expected
