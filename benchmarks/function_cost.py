"""What the hot scripts would cost Redis as a Redis Function (FCALL) instead
of a script (EVALSHA), counted in instructions by valgrind's callgrind.

Redis runs a script's whole text on every EVALSHA: every helper of _lib.lua
the script uses, and every local function of the script itself, is made
again (a closure, its upvalues, then garbage) before the script does its
first step. A Redis Function library runs its text once, at FUNCTION LOAD:
helpers defined at the library's top level are made once and live on. This
tool measures that difference on the code as it is, without changing it:
each script's text (the helpers the loader picks, then the script) is
loaded both ways, the helpers at the library's top level and the script as
the registered function's body, unchanged (KEYS and ARGV are its two
parameters).

For each transport, one client of this tree enqueues N no-op jobs one per
call (App.enqueue), claims them one per call, then acks them one per call,
through the Scripts layer (its direct lane off, so both transports take
redis-py's generic path; the client's cost is not counted), each transport
into a queue of its own on one redis-server under callgrind. A figure is
one phase's Redis instructions divided by N.

  python benchmarks/function_cost.py [--n 2000]

Needs valgrind (apt-get install valgrind) and Redis 7 (functions)."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from instructions import redis_under_callgrind  # noqa: E402
from script_instructions import PHASES, run_phases  # noqa: E402

TRANSPORTS = ("evalsha", "fcall")

CLIENT = """
import sys
import anyio, lq_bench
from leasequeue import JobRequest
from leasequeue.store.loader import SHEBANGS, DEFAULT_SHEBANG, lib_for, lua_dir

lq_bench.PREFIX = {prefix!r}


def library(name):
    # the script's text as a Redis Function: the helpers at the library's
    # top level (made once, at FUNCTION LOAD), the script as the body
    folder = lua_dir()
    body = (folder / (name + ".lua")).read_text()
    lib = lib_for(body, (folder / "_lib.lua").read_text())
    line = SHEBANGS.get(name, DEFAULT_SHEBANG)
    flags = ", ".join(repr(f) for f in line.partition("flags=")[2].split(",") if f)
    fname = "lqbench_" + name
    return fname, ("#!lua name=" + fname + "\\n" + lib + "\\n"
                   + "redis.register_function{{function_name='" + fname + "', flags={{"
                   + flags + "}}, callback=function(KEYS, ARGV)\\n" + body + "\\nend}}\\n")


class FunctionCall:
    def __init__(self, redis, name):
        self.redis = redis
        self.fname, self.text = library(name)

    async def load(self):
        await self.redis.function_load(self.text, replace=True)

    async def __call__(self, keys, args):
        return await self.redis.fcall(self.fname, len(keys), *keys, *args)


async def main():
    app = lq_bench._app({url!r})
    scripts = app.scripts
    scripts._lane = None  # both transports through redis-py's generic path
    if {transport!r} == "fcall":
        for name in ("enqueue", "claim", "ack"):
            call = FunctionCall(app.redis, name)
            await call.load()
            scripts._scripts[name] = call
    qk = app.keys(lq_bench.QUEUE)

    async def claim(i):
        return await scripts.claim(qk, 1, lq_bench.LEASE_MS, "w", 1, "c%d" % i)

    for _ in range(10):  # warm: scripts loaded, hashes past their small encodings
        await app.enqueue("noop")
    for i in range(10):
        await lq_bench.ack_all(app, qk, (await claim(-1 - i)).jobs, 86_400_000)
    print("ready", flush=True); sys.stdin.readline()
    for _ in range({n}):
        await app.enqueue("noop")
    print("enqueue", flush=True); sys.stdin.readline()
    held = []
    for i in range({n}):
        held += (await claim(i)).jobs
    assert len(held) == {n}, len(held)
    print("claim", flush=True); sys.stdin.readline()
    for job in held:
        await lq_bench.ack_all(app, qk, [job], 86_400_000)
    print("ack", flush=True); sys.stdin.readline()
    await app.close()

anyio.run(main)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000, help="jobs per phase")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    rows = {}
    # hz 1: serverCron, which runs by the wall clock, 50x slower under callgrind,
    # adds less to the counts
    with redis_under_callgrind("--hz", "1") as (port, count):
        for transport in TRANSPORTS:
            code = CLIENT.format(url=f"redis://127.0.0.1:{port}/0", n=args.n,
                                 transport=transport, prefix=f"fc-{transport}")
            rows[transport] = run_phases(code, HERE.parent, count, args.n)
    base = rows[TRANSPORTS[0]]
    print(f"Redis instructions per job, one job per call, {args.n} calls per phase (callgrind)")
    print("| transport | " + " | ".join(PHASES) + " |")
    print("|---|" + "---:|" * len(PHASES))
    for transport, figures in rows.items():
        cells = [f"{figures[p]:,.0f} ({figures[p] / base[p]:.3f})" for p in PHASES]
        print(f"| {transport} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
