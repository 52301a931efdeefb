"""Accuracy of rate limits at the source: the instants rate.lua grants starts,
next to the instants the handlers record (what benchmarks/rate_bench.py
reports). Starts timed in a handler come after the grant by the worker's lag
(the admission call's reply, the start mark, the event loop), so their busiest
windows can exceed burst + rate x window while the grants do not.

Diagnostic only, nothing in the package changes: this copies the source tree
to a temporary directory, patches that copy's lua/rate.lua to RPUSH the server
instant of each grant to `diag:grants`, runs rate_bench.py's accuracy section
there, and reports the busiest 100 ms and 1 s windows of the grants and of the
handler-timed starts, and the lag between them (k-th grant to k-th start).

Run: python benchmarks/rate_grants.py [--seconds 20]"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
GRANT = "    redis.call('RPUSH', 'diag:grants', string.format('%.0f', now))\n"
PATCHES = (  # (text in lua/rate.lua, the same with the grant recorded after it)
    ("    redis.call('ZREM', reserved_key, holder)\n    real = real + interval\n",),
    ("  if v >= allowed_at then\n    tat = tat + interval\n    real = real + interval\n",),
)
DUMP = '''
    import json as _json
    with open(os.environ["LQ_DIAG_OUT"], "w") as _out:
        _json.dump({"grants": [int(x) for x in client.lrange("diag:grants", 0, -1)],
                    "starts": [int(x) for x in client.lrange(key, 0, -1)]}, _out)
'''


def busiest(instants: list[int], window_us: int) -> int:
    best, j = 0, 0
    for i, s in enumerate(instants):
        while instants[j] <= s - window_us:
            j += 1
        best = max(best, i - j + 1)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="lq-rate-grants-") as tmp:
        tree = Path(tmp) / "tree"
        shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(
            ".git", ".venv", "node_modules", "__pycache__", "results"))
        rate = tree / "lua" / "rate.lua"
        text = rate.read_text()
        for (old,) in PATCHES:
            if text.count(old) != 1:
                sys.exit(f"rate.lua changed: cannot place the grant probe after {old!r}")
            text = text.replace(old, old + GRANT)
        rate.write_text(text)
        bench = tree / "benchmarks" / "rate_bench.py"
        code = bench.read_text()
        anchor = "        client.delete(key)\n"
        marker = "    starts = sorted(int(x) for x in client.lrange(key, 0, -1))\n"
        if code.count(anchor) != 1 or code.count(marker) != 1:
            sys.exit("rate_bench.py changed: cannot place the dump")
        code = code.replace(anchor, anchor + '        client.delete("diag:grants")\n')
        code = code.replace(marker, DUMP + marker)
        bench.write_text(code)
        out = Path(tmp) / "grants.json"
        env = dict(os.environ, PYTHONPATH=str(tree), LQ_DIAG_OUT=str(out))
        run = subprocess.run([sys.executable, str(bench), "--sections", "accuracy",
                              "--seconds", str(args.seconds)], env=env, cwd=tree,
                             capture_output=True, text=True, timeout=args.seconds * 10 + 300)
        accuracy = next((json.loads(line) for line in run.stdout.splitlines()
                         if '"rate_accuracy"' in line), None)
        if accuracy is None or not out.exists():
            sys.exit(f"the accuracy run failed:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
        data = json.loads(out.read_text())
    grants, starts = sorted(data["grants"]), sorted(data["starts"])
    lags = sorted((s - g) / 1000 for s, g in zip(starts, grants, strict=False))
    print(json.dumps({
        "metric": "rate_grants", "rate": accuracy["rate"], "burst": accuracy["burst"],
        "grants": len(grants), "starts": len(starts),
        "grants_most_in_100ms": busiest(grants, 100_000),
        "grants_most_in_1s": busiest(grants, 1_000_000),
        "starts_most_in_100ms": busiest(starts, 100_000),
        "starts_most_in_1s": busiest(starts, 1_000_000),
        "bound_100ms": accuracy["bound_100ms"], "bound_1s": accuracy["bound_1s"],
        "lag_ms_p50": round(lags[len(lags) // 2], 1),
        "lag_ms_p99": round(lags[int(len(lags) * 0.99)], 1),
        "lag_ms_max": round(lags[-1], 1),
        "windows": accuracy["windows"],
    }))


if __name__ == "__main__":
    main()
