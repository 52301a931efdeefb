"""Redis's own time for a script call that finds Redis cold (after an idle
gap) against back to back: what the enqueue->start path pays inside Redis
when a probe reaches an idle Redis (README, design notes, "Enqueue->start").

Three calls, interleaved, each ``--calls`` times, from SLOWLOG with every
command logged: an EVALSHA of ``return 1``; the helpers enqueue.lua's text
defines (_lib.lua's, as the loader prepends them) then ``return 1``; a
one-job enqueue.lua call through SyncApp. First back to back, then each call
alone after a sleep of each ``--gaps`` (ms).

  python benchmarks/cold_scripts.py [--calls 300] [--gaps 2,12]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common
import redis
from redis_server import RedisServer

from leasequeue import SyncApp
from leasequeue.store.loader import lib_for, lua_dir, script_source

FLAGS = "#!lua flags=allow-oom\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--gaps", default="2,12", help="idle gaps in ms, comma-separated")
    args = ap.parse_args()
    gaps = [0.0] + [float(g) / 1000 for g in args.gaps.split(",")]
    server = RedisServer()
    server.start()
    try:
        client = redis.Redis(port=server.port)
        app = SyncApp(server.url, prefix="cold")
        for _ in range(300):  # scripts loaded, the queue checked, the hashes grown
            app.enqueue("noop", queue="default")
        body = (lua_dir() / "enqueue.lua").read_text()
        lib = (lua_dir() / "_lib.lua").read_text()
        empty = client.script_load(FLAGS + "return 1")
        helpers = client.script_load(FLAGS + lib_for(body, lib) + "\nreturn 1")
        enqueue = hashlib.sha1(script_source("enqueue", shebang=True).encode()).hexdigest()
        calls = {"return 1": (empty, lambda: client.evalsha(empty, 0)),
                 "enqueue.lua's helpers, then return 1": (helpers,
                                                          lambda: client.evalsha(helpers, 0)),
                 "enqueue.lua, one job (SyncApp)": (enqueue,
                                                    lambda: app.enqueue("noop", queue="default"))}
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 100_000)
        print(f"Redis's own time per call (SLOWLOG, us), {args.calls} calls of each, "
              f"interleaved; {server.url}")
        print(f"| {'gap':12s} | {'call':40s} | p50 | p90 |")
        print(f"|{'-' * 14}|{'-' * 42}|---:|---:|")
        for gap in gaps:
            client.slowlog_reset()
            for _ in range(args.calls):
                for _, call in calls.values():
                    if gap:
                        time.sleep(gap)
                    call()
            by_sha = common.slowlog_by_sha(client)
            label = "back to back" if not gap else f"{gap * 1000:g} ms apart"
            for name, (sha, _) in calls.items():
                times = sorted(by_sha.get(sha, [0]))
                print(f"| {label:12s} | {name:40s} | {times[len(times) // 2]} | "
                      f"{times[int(len(times) * 0.9)]} |")
        app.close()
        client.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
