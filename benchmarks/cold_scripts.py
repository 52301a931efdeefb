"""Redis's own time for a script call that finds Redis cold (after an idle
gap) against back to back: what the enqueue->start path pays inside Redis
when a probe reaches an idle Redis (DESIGN-NOTES.md, "Enqueue->start").

Four calls, interleaved, each ``--calls`` times, from SLOWLOG with every
command logged: an EVALSHA of ``return 1``; the helpers enqueue.lua's text
defines (_lib.lua's, as the loader prepends them) then ``return 1``; one
no-op job queued now, sent to enqueue.lua (as one-job enqueues of it were
before enqueue_one.lua came), then one sent to enqueue_one.lua (as SyncApp
and App send it now). First back to back, then each call alone after a
sleep of each ``--gaps`` (ms).

  python benchmarks/cold_scripts.py [--calls 300] [--gaps 2,12]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common
import redis
from redis_server import RedisServer

from leasequeue import SyncApp
from leasequeue.models import NewJob
from leasequeue.store.keys import QueueKeys
from leasequeue.store.loader import lib_for, lua_dir, script_source
from leasequeue.store.scripts import enqueue_args
from leasequeue.store.specs import SPECS

FLAGS = "#!lua flags=allow-oom\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--gaps", default="2,12", help="idle gaps in ms, comma-separated")
    args = ap.parse_args()
    gaps = [0.0] + [float(g) / 1000 for g in args.gaps.split(",")]
    with RedisServer() as server:
        client = redis.Redis(port=server.port)
        app = SyncApp(server.url, prefix="cold")
        for _ in range(1000):  # scripts loaded, the queue checked, the jobs hash past its listpack
            app.enqueue("noop", queue="default")
        body = (lua_dir() / "enqueue.lua").read_text()
        lib = (lua_dir() / "_lib.lua").read_text()
        empty = client.script_load(FLAGS + "return 1")
        helpers = client.script_load(FLAGS + lib_for(body, lib) + "\nreturn 1")
        shas = {name: client.script_load(script_source(name, shebang=True))
                for name in ("enqueue", "enqueue_one")}
        qk = QueueKeys("cold", "default")  # the queue SyncApp filled above
        settings = app.scripts.settings
        payload = b"\x94\x01\xa0\xa0\x80"  # a no-op job's envelope

        def keys(name: str) -> list[str]:
            return [getattr(qk, k) for k in SPECS[name].keys]

        def general() -> None:  # enqueue.lua's arguments for the job, as a one-job call's
            job = NewJob(os.urandom(14).hex(), "noop", payload, 0, 0, 0, 0, "")
            client.evalsha(shas["enqueue"], 8, *keys("enqueue"), *enqueue_args(settings, [job]))

        def line() -> None:  # enqueue_one.lua's (SPECS: wake cap, name, budgets, grp, ...)
            client.evalsha(shas["enqueue_one"], 4, *keys("enqueue_one"), settings.wake_cap,
                           "noop", 0, 0, "", payload, os.urandom(14).hex())

        calls = {"return 1": (empty, lambda: client.evalsha(empty, 0)),
                 "enqueue.lua's helpers, then return 1": (helpers,
                                                          lambda: client.evalsha(helpers, 0)),
                 "enqueue.lua, one job": (shas["enqueue"], general),
                 "enqueue_one.lua, one job": (shas["enqueue_one"], line)}
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


if __name__ == "__main__":
    main()
