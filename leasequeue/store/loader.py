"""Finds the Lua scripts and builds the text loaded into Redis: the flags
line (real Redis), the shared helpers of _lib.lua, then the script. It never
talks to Redis."""

from __future__ import annotations

import re
from functools import cache
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
# the enqueues (new work is refused, with a clear OOM error) and the read-only
# stats, schedule_list and schedule_trigger. fakeredis does not accept the
# shebang: the embedded mode goes without.
SHEBANGS = {"enqueue": "#!lua", "enqueue_one": "#!lua", "stats": "#!lua flags=no-writes",
            "schedule_list": "#!lua flags=no-writes", "schedule_trigger": "#!lua flags=no-writes"}
DEFAULT_SHEBANG = "#!lua flags=allow-oom"
# sent as EVALSHA_RO on one Redis: Redis checks read AND write access on every
# key an EVALSHA declares, even for a no-writes script, so a read-only ACL
# user (SECURITY.md) can run these only this way
READ_ONLY = frozenset(name for name, line in SHEBANGS.items() if "no-writes" in line)


def script_source(name: str, shebang: bool = False) -> str:
    """The text loaded into Redis: the flags line (real Redis), the shared
    helpers the script uses, then the script."""
    folder = lua_dir()
    head = SHEBANGS.get(name, DEFAULT_SHEBANG) + "\n" if shebang else ""
    body = (folder / f"{name}.lua").read_text()
    return head + lib_for(body, (folder / "_lib.lua").read_text()) + "\n" + body


_DEFINITION = re.compile(r"^local (?:function )?(\w+(?:\s*,\s*\w+)*)", re.MULTILINE)
_WORD = re.compile(r"[A-Za-z_]\w*")


@cache
def lib_chunks(lib: str) -> tuple[tuple[frozenset[str], str], ...]:
    """_lib.lua cut at each top-level ``local`` (a constant or a function, with
    the comment lines above it): (the names it defines, its text), in order."""
    starts = [m.start() for m in _DEFINITION.finditer(lib)]
    chunks = []
    for i, start in enumerate(starts):
        # the comment block right above a definition belongs to it
        begin = start
        while True:
            prev = lib.rfind("\n", 0, begin - 1) + 1
            if begin == 0 or not lib[prev:begin].startswith("--"):
                break
            begin = prev
        end = starts[i + 1] if i + 1 < len(starts) else len(lib)
        match = _DEFINITION.match(lib, start)
        assert match is not None
        names = frozenset(n.strip() for n in match.group(1).split(","))
        chunks.append((names, begin, end))
    # the text between chunks (the file header) is dropped; each chunk ends
    # where the next one's comment begins
    out = []
    for i, (names, begin, end) in enumerate(chunks):
        stop = chunks[i + 1][1] if i + 1 < len(chunks) else end
        out.append((names, lib[begin:stop]))
    return tuple(out)


def lib_for(script: str, lib: str) -> str:
    """The helpers of _lib.lua that ``script`` uses, directly or through other
    helpers, in their order in the file. Redis runs the whole text on every
    call, so each unused helper would cost a closure (and garbage) per call:
    with all of them, a one-job claim or ack cost about a quarter more."""
    chunks = lib_chunks(lib)
    needed: set[str] = set()
    pending = set(_WORD.findall(_strip_comments(script)))
    while pending:
        word = pending.pop()
        for names, text in chunks:
            if word in names and not names <= needed:
                needed |= names
                pending |= set(_WORD.findall(_strip_comments(text))) - needed
    return "".join(text for names, text in chunks if names & needed)


def _strip_comments(lua: str) -> str:
    return re.sub(r"--[^\n]*", "", lua)
