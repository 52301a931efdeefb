"""Redis's own time for one enqueue per call: INFO commandstats (usec per
EVALSHA) for the very call SyncApp.enqueue sends for a no-op job
(enqueue_one.lua, its bytes formatted by scripts.OneJobCalls) against
bee-queue's addJob.lua called with a job like the one bee-queue's
Job.save() stores. Both go the same way, one call at a time on one
blocking socket read by hiredis, so that Redis sees the same pace of calls
from both (its time per call moves with that pace: through redis-py's
slower client both figures are lower). N calls each, rounds alternating
(ours first, then bee-queue's first, ...), on this harness's own
redis-server. Needs the Node peers installed (benchmarks/node/node_modules,
`python benchmarks/envs.py`).

  python benchmarks/one_enqueue_redis_time.py [N] [ROUNDS]
      > benchmarks/results/one_enqueue_redis_time.txt
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import hiredis
import redis

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from common import cpu_model  # noqa: E402
from redis_server import RedisServer  # noqa: E402

from leasequeue import SyncApp  # noqa: E402
from leasequeue.producer import NO_DELAY, NO_PRIORITY  # noqa: E402

ADD_JOB = HERE / "node" / "node_modules" / "bee-queue" / "lib" / "lua" / "addJob.lua"
# what bee-queue's Job.save() stores for a job with no data (its toData())
BEE_JOB = b'{"data":{},"options":{"timestamp":1764900000000,"stacktraces":[]},"status":"created"}'


def evalsha_stats(client: redis.Redis) -> tuple[int, int]:
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), int(stats.get("usec", 0))


def call(sock: socket.socket, packed: bytes) -> object:
    reader = hiredis.Reader()
    sock.sendall(packed)
    while (reply := reader.gets()) is False:
        reader.feed(sock.recv(65536))
    return reply


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    server = RedisServer()
    server.start()
    ours, bees = "leasequeue enqueue_one.lua", "bee-queue addJob.lua"
    figures: dict[str, list[float]] = {ours: [], bees: []}
    try:
        client = redis.Redis.from_url(server.url)
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with SyncApp(server.url, prefix="redis-time") as sync:
            sync.enqueue("noop", queue="default")  # its scripts loaded, its queue checked
            qk = sync.producer.keys_for("default", "x")

            def our_call() -> bytes:  # the bytes SyncApp.enqueue sends for a new no-op job
                *_, job = sync.producer.one("noop", None, None, "default", NO_DELAY, NO_PRIORITY,
                                            None, None, None, None, None)
                made = sync.scripts._one_job.call(sync.scripts.settings, qk, job,
                                                  sync.scripts._keys_of)
                assert made is not None and made[2] == "enqueue_one"
                return made[0]

            bee_sha = client.script_load(ADD_JOB.read_text())
            bee_call = hiredis.pack_command(("EVALSHA", bee_sha, 3, "bq:b:id", "bq:b:jobs",
                                             "bq:b:waiting", "", BEE_JOB))
            makers: dict[str, Callable[[], bytes]] = {ours: our_call, bees: lambda: bee_call}
            for k in range(rounds):
                for name in (ours, bees) if k % 2 == 0 else (bees, ours):
                    make = makers[name]
                    client.config_resetstat()
                    for _ in range(n):
                        call(sock, make())
                    calls, usec = evalsha_stats(client)
                    figures[name].append(usec / calls)
                client.flushall()  # (the scripts stay loaded)
        sock.close()
        client.close()
    finally:
        server.stop()
    print(f"# python benchmarks/one_enqueue_redis_time.py {n} {rounds}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpu_model()}, "
          f"{os.cpu_count()} cores")
    print(f"one enqueue per call on one blocking socket, {n} calls x {rounds} rounds "
          "(alternating); Redis's usec per EVALSHA (INFO commandstats), each round's figure")
    for name, rows in figures.items():
        print(f"{name:28s} {', '.join(f'{r:.2f}' for r in rows)}   "
              f"median {statistics.median(rows):.2f}")


if __name__ == "__main__":
    main()
