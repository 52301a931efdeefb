"""Finds the Lua scripts and builds the text loaded into Redis: the flags
line (real Redis), the shared helpers of _lib.lua, then the script. It never
talks to Redis."""

from __future__ import annotations

from pathlib import Path


def lua_dir() -> Path:
    """The packaged scripts (wheel) or the top-level lua/ of a source checkout."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "lua"
    if packaged.is_dir():
        return packaged
    return package.parent / "lua"


# Redis 7 script flags. Over maxmemory (with the noeviction policy leasequeue
# requires) Redis refuses a flag-less script whose first write would grow
# memory, which would refuse lease renewals and acks exactly when a full
# Redis needs work to drain. So every script may run over maxmemory except
# enqueue (new work is refused, with a clear OOM error) and the read-only
# stats, schedule_list and schedule_trigger. fakeredis does not accept the
# shebang: the embedded mode goes without.
SHEBANGS = {"enqueue": "#!lua", "stats": "#!lua flags=no-writes",
            "schedule_list": "#!lua flags=no-writes", "schedule_trigger": "#!lua flags=no-writes"}
DEFAULT_SHEBANG = "#!lua flags=allow-oom"
# sent as EVALSHA_RO on one Redis: Redis checks read AND write access on every
# key an EVALSHA declares, even for a no-writes script, so a read-only ACL
# user (SECURITY.md) can run these only this way
READ_ONLY = frozenset(name for name, line in SHEBANGS.items() if "no-writes" in line)


def script_source(name: str, shebang: bool = False) -> str:
    """The text loaded into Redis: the flags line (real Redis), the shared
    helpers, then the script."""
    folder = lua_dir()
    head = SHEBANGS.get(name, DEFAULT_SHEBANG) + "\n" if shebang else ""
    return head + (folder / "_lib.lua").read_text() + "\n" + (folder / f"{name}.lua").read_text()


