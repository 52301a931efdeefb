"""Least-privilege Redis ACL users per role: builds the ``ACL SETUSER`` line
of a producer, a worker, an operator and a read-only viewer for one prefix.
It never talks to Redis; SECURITY.md explains what the lines enforce.

What Redis 7 checks, tested in tests/test_security_acl.py:

- EVALSHA checks read AND write access on every key the script declares in
  KEYS before the script runs (also for a ``no-writes`` script); EVALSHA_RO
  needs read access only. A script whose declared keys a user may not write
  is refused whole, before it changes anything.
- every ``redis.call`` inside a script is checked against the caller's
  commands and key patterns too. ACLs cannot say WHICH script a user runs:
  a user who may EVALSHA and SCRIPT LOAD can run any Lua made of the
  commands and keys it is allowed. The roles are therefore fenced by key
  patterns (what a role's operations declare) and command lists.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from enum import StrEnum

from .errors import ConfigError
from .store.keys import (
    QueueKeys,
    check_prefix,
    check_queue_name,
    default_limiter_prefix,
    queues_key,
    resource_keys,
    schedules_keys,
)
from .store.loader import script_source
from .store.shards import SEPARATOR
from .store.specs import SPECS


class Role(StrEnum):
    PRODUCER = "producer"  # enqueue, read its queues' jobs, wait for them
    WORKER = "worker"      # everything a worker does, on its queues' keys only
    OPERATOR = "operator"  # a dashboard / CLI: read everything, replay, purge, pause
    VIEWER = "viewer"      # the operator's read-only variant


# the scripts each role runs (a role may run any Lua made of its commands and
# keys; these lists decide its commands, and the tests run each one)
ROLE_SCRIPTS: dict[Role, tuple[str, ...]] = {
    Role.PRODUCER: ("enqueue", "enqueue_one", "queue_config", "watch", "stats"),
    Role.WORKER: ("claim", "claim_line", "start", "renew", "ack", "fail", "release", "wake",
                  "reap", "expire", "enqueue", "enqueue_one", "queue_config", "watch", "cancel",
                  "stats", "schedule_upsert",
                  "schedule_fire", "schedule_done", "schedule_list", "schedule_trigger",
                  "limiter_acquire", "limiter_renew", "limiter_release"),
    Role.OPERATOR: tuple(SPECS),
    Role.VIEWER: ("stats", "schedule_list"),
}

# what every client sends on connect: SELECT only for a URL with a database
# number other than 0. Not CLIENT SETINFO: Redis 7.0 does not know it (an ACL
# naming it is refused) and redis-py ignores a refused one on 7.2+
CONNECT = ("ping", "select")
# the App's direct reads: get_job, jobs (the line: lrange, lindex, lpos),
# dead_letters, locating a job, sizes
READS = ("hget", "hmget", "hexists", "exists", "zscore", "zrank", "zcount", "zcard", "zrange",
         "llen", "lrange", "lindex", "lpos", "xrevrange", "smembers", "sismember")
# App.verify_queues records each queue a process uses in {P}:queues (the
# dashboard's and the exporter's list of queues, never a keyspace scan)
RECORD = ("sadd",)
# App.wait: block on a job's end notification, put the token back for others
WAIT = ("blpop", "rpush", "pexpire")
# App.pause / App.resume
PAUSE = ("set", "del", "rpush", "ltrim")
# the scripts' loader: EVALSHA, and SCRIPT LOAD after a NOSCRIPT (never EVAL,
# never SCRIPT FLUSH / KILL)
RUN_SCRIPTS = ("evalsha", "evalsha_ro", "script|load")
# the commands in the scripts that write: a viewer gets none of them, though
# its read-only key patterns would refuse their writes anyway
WRITES = frozenset(("del", "hdel", "hincrby", "hset", "hsetnx", "incrby", "lpop", "lpush",
                    "ltrim", "pexpire", "rpush", "set", "xadd", "zadd", "zpopmin", "zrem",
                    "zremrangebyscore"))
# a Redis Cluster client reads the slot map
CLUSTER = ("cluster|slots", "cluster|shards", "cluster|nodes", "readonly")

# a command a script sends: redis.call / redis.pcall, or _lib.lua's bulk()
# (which sends its command in chunks: claim.lua's LPUSH goes only that way)
_CALL = re.compile(r"(?:redis\.p?call|bulk)\(\s*'([A-Za-z]+)'")


def script_commands(names: Iterable[str]) -> list[str]:
    """The commands the given scripts call, lower case, sorted: read from the
    text each one is loaded as (script_source: the script and the shared
    helpers it uses), so a helper another role's script uses grants nothing."""
    text = "".join(script_source(name) for name in names)
    return sorted({m.lower() for m in _CALL.findall(text)})


def role_commands(role: Role, cluster: bool = False) -> list[str]:
    """Every command a role's user may run, sorted."""
    commands = set(CONNECT) | set(script_commands(ROLE_SCRIPTS[role]))
    if role is Role.VIEWER:
        commands = (commands - WRITES) | {"evalsha_ro", "script|load", *READS}
    else:
        commands |= {*RUN_SCRIPTS, *READS, *WAIT, *RECORD}
    if role is Role.OPERATOR:
        commands |= set(PAUSE)
    if cluster:
        commands |= set(CLUSTER)
    return sorted(commands)


def _queue_tags(prefix: str, queues: Sequence[str]) -> list[QueueKeys]:
    """Key-pattern stand-ins for the queues: each queue and its shards, or
    every queue of the prefix (``*``)."""
    if not queues:
        return [QueueKeys(prefix, "*")]
    out = []
    for q in queues:
        out += [QueueKeys(prefix, check_queue_name(q)), QueueKeys(prefix, f"{q}{SEPARATOR}*")]
    return out


def key_patterns(role: Role, prefix: str, queues: Sequence[str] = (),
                 limiter_prefix: str | None = None) -> list[str]:
    """The ACL key patterns of a role: ``~`` (read and write), ``%R~``
    (read only). ``queues`` limits a producer or a worker to those queues
    (empty: every queue of the prefix)."""
    check_prefix(prefix)
    limiter = check_prefix(limiter_prefix or default_limiter_prefix(prefix))
    tags = _queue_tags(prefix, queues)
    sk = schedules_keys(prefix)
    limits = "{" + limiter + ":*"
    if role is Role.PRODUCER:
        # read the whole queue; write only the keys its scripts declare, and
        # the job-end notifications App.wait blocks on
        writes = sorted({k for name in ROLE_SCRIPTS[role] if name != "stats"
                         for k in SPECS[name].keys})
        out = []
        for qk in tags:
            out.append(f"%R~{qk.tag}:*")
            out += [f"~{getattr(qk, k)}" for k in writes]
            out.append(f"~{qk.notify('*')}")
        return [*out, f"~{queues_key(prefix)}"]
    if role is Role.WORKER:
        # the resource ledger of the prefix (ctx.resource, its reconcilers)
        return [*(f"~{qk.tag}:*" for qk in tags), f"~{limits}", *(f"~{k}" for k in sk.all()),
                f"~{queues_key(prefix)}", f"~{resource_keys(prefix).tag}:*"]
    everything = ["{" + prefix + ":*", *sk.all(), queues_key(prefix)]
    if not limits.startswith("{" + prefix + ":"):
        everything.append(limits)
    mode = "%R~" if role is Role.VIEWER else "~"
    return [mode + p for p in everything]


def password_rule(password: str | None) -> str:
    """``#<sha256>`` of a password (the line then holds no secret), or a
    placeholder to replace."""
    if password is None:
        return ">CHANGE-ME"
    return "#" + hashlib.sha256(password.encode()).hexdigest()


def acl_rules(role: Role | str, prefix: str, queues: Sequence[str] = (),
              limiter_prefix: str | None = None, password: str | None = None,
              cluster: bool = False) -> list[str]:
    """The rules of ``ACL SETUSER <user> <rules...>`` for a role."""
    try:
        r = Role(role)
    except ValueError:
        raise ConfigError(f"unknown role {role!r}: use one of "
                          f"{', '.join(x.value for x in Role)}") from None
    if r in (Role.OPERATOR, Role.VIEWER) and queues:
        raise ConfigError(f"the {r} role sees every queue of the prefix: drop the queues")
    return ["reset", "on", password_rule(password), "resetchannels",
            *key_patterns(r, prefix, queues, limiter_prefix), "-@all",
            *(f"+{c}" for c in role_commands(r, cluster))]


def acl_setuser(user: str, role: Role | str, prefix: str, queues: Sequence[str] = (),
                limiter_prefix: str | None = None, password: str | None = None,
                cluster: bool = False) -> str:
    """One ready-to-paste ``ACL SETUSER`` line (redis-cli quoting)."""
    if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,100}", user):
        raise ConfigError(f"invalid ACL user name {user!r}")
    rules = acl_rules(role, prefix, queues, limiter_prefix, password, cluster)
    return " ".join(["ACL", "SETUSER", user, *(_quote(x) for x in rules)])


def _quote(rule: str) -> str:
    # braces, '%' and '~' pass through redis-cli unquoted; '*' must not meet a shell
    return f'"{rule}"' if any(c in rule for c in "*{}|") else rule


__all__ = ["Role", "acl_rules", "acl_setuser", "key_patterns", "role_commands",
           "script_commands"]
