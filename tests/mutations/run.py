"""Planted bugs: apply each mutation of tests/mutations/mutations.py to its
own copy of the repository and require its focused tests to fail there.

    python tests/mutations/run.py            # every mutation, two at a time
    python tests/mutations/run.py NAME ...   # only these
    python tests/mutations/run.py --list     # the table, nothing run
    python tests/mutations/run.py --baseline # also run every selection unmutated

Exit status: 0 when every mutation was caught; 1 when one survived, its text
was not found exactly once, or its tests could not run (a selection that
names no test, a collection error: pytest's exit status other than 1)."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.mutations.mutations import MUTATIONS, Mutation  # noqa: E402

EXCLUDED = shutil.ignore_patterns(".venv", ".git", "__pycache__", ".pytest_cache",
                                  ".mypy_cache", ".ruff_cache", "*.egg-info", "build", "dist")
MAX_JOBS = 2  # the CI machine has two cores; each run also starts a redis-server
RUN_TIMEOUT = 300.0  # seconds for one mutation's tests (pytest's own timeout is lower)
TEST_TIMEOUT = 120  # pytest-timeout per test: a mutation that hangs a test fails it
PYTEST_TESTS_FAILED = 1  # pytest's exit status when tests ran and some failed


@dataclass(frozen=True, slots=True)
class Result:
    mutation: Mutation
    verdict: str  # caught | SURVIVED | NOT FOUND | ERROR
    seconds: float
    detail: str = ""  # the first failing test, or why the run is an error

    @property
    def ok(self) -> bool:
        return self.verdict == "caught"


def check_texts(mutations: tuple[Mutation, ...]) -> list[Result]:
    """Every mutation's text occurs exactly once in its file (in this tree)."""
    problems = []
    for m in mutations:
        path = ROOT / m.path
        count = path.read_text().count(m.old) if path.is_file() else 0
        if count != 1:
            where = "no such file" if not path.is_file() else f"found {count} times"
            problems.append(Result(m, "NOT FOUND", 0.0, f"{m.path}: {where}"))
    return problems


def copy_tree(dest: Path) -> Path:
    tree = dest / "repo"
    shutil.copytree(ROOT, tree, ignore=EXCLUDED)
    return tree


def test_env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    # the copy first, so its (mutated) leasequeue is the one imported, also by
    # the worker processes tests start (they inherit PYTHONPATH)
    env["PYTHONPATH"] = str(tree) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("PYTEST_ADDOPTS", None)
    return env


def check_import(tree: Path) -> None:
    """The copy's package is the one imported (not an installed or editable one)."""
    out = subprocess.run(
        [sys.executable, "-c", "import leasequeue, leasequeue.store.loader as l; "
                               "print(leasequeue.__file__); print(l.lua_dir())"],
        cwd=tree, env=test_env(tree), capture_output=True, text=True, check=True)
    for line in out.stdout.split():
        if not Path(line).resolve().is_relative_to(tree.resolve()):
            raise SystemExit(f"the copy is not what gets imported: {line} is outside {tree}")


def pytest_command(m: Mutation) -> list[str]:
    return [sys.executable, "-m", "pytest", *m.selection, "-x", "-q", "-p", "no:cacheprovider",
            f"--timeout={TEST_TIMEOUT}"]


def first_failure(output: str) -> str:
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" - ")[0]
    return output.strip().splitlines()[-1] if output.strip() else ""


def run_one(m: Mutation, mutate: bool = True) -> Result:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"lq-mutation-{m.name}-") as tmp:
        tree = copy_tree(Path(tmp))
        target = tree / m.path
        text = target.read_text()
        if text.count(m.old) != 1:
            return Result(m, "NOT FOUND", 0.0, f"{m.path}: found {text.count(m.old)} times")
        if mutate:
            target.write_text(text.replace(m.old, m.new))
        try:
            proc = subprocess.run(pytest_command(m), cwd=tree, env=test_env(tree),
                                  capture_output=True, text=True, timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            return Result(m, "ERROR", time.monotonic() - started,
                          f"no result within {RUN_TIMEOUT:.0f} s")
    seconds = time.monotonic() - started
    output = proc.stdout + proc.stderr
    if not mutate:
        verdict = "passes" if proc.returncode == 0 else "ERROR"
        return Result(m, verdict, seconds, "" if proc.returncode == 0 else
                      f"unmutated run exited {proc.returncode}: {first_failure(output)}")
    if proc.returncode == PYTEST_TESTS_FAILED:
        return Result(m, "caught", seconds, first_failure(output))
    if proc.returncode == 0:
        return Result(m, "SURVIVED", seconds, "every selected test passed")
    return Result(m, "ERROR", seconds, f"pytest exited {proc.returncode}: "
                                       f"{first_failure(output)}")


def print_table(results: list[Result]) -> None:
    width = max([len(r.mutation.name) for r in results] + [8])
    print(f"{'mutation':<{width}}  {'verdict':<9}  {'seconds':>7}  caught by / detail")
    for r in results:
        print(f"{r.mutation.name:<{width}}  {r.verdict:<9}  {r.seconds:7.1f}  {r.detail}")


def run_all(mutations: tuple[Mutation, ...], jobs: int, mutate: bool) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="lq-mutation-check-") as tmp:
        check_import(copy_tree(Path(tmp)))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_one, m, mutate) for m in mutations]
        results = []
        for future in futures:
            r = future.result()
            print(f"  {r.mutation.name}: {r.verdict} ({r.seconds:.1f} s)", flush=True)
            results.append(r)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="run only these mutations")
    parser.add_argument("--list", action="store_true", help="print the mutations and exit")
    parser.add_argument("--baseline", action="store_true",
                        help="first run every selection unmutated: each must pass")
    parser.add_argument("-j", "--jobs", type=int, default=MAX_JOBS,
                        help=f"mutations run at once (at most {MAX_JOBS})")
    args = parser.parse_args(argv)

    known = {m.name for m in MUTATIONS}
    if len(known) != len(MUTATIONS):
        raise SystemExit("two mutations share a name")
    unknown = [n for n in args.names if n not in known]
    if unknown:
        raise SystemExit(f"unknown mutation(s): {', '.join(unknown)}")
    chosen = tuple(m for m in MUTATIONS if not args.names or m.name in args.names)
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.description}\n    {m.path}\n    " + "\n    ".join(m.selection))
        return 0
    jobs = max(1, min(args.jobs, MAX_JOBS))

    missing = check_texts(chosen)
    if missing:
        print("mutation text not found exactly once (update tests/mutations/mutations.py):")
        print_table(missing)
        return 1
    started = time.monotonic()
    if args.baseline:
        print(f"baseline: {len(chosen)} selections, unmutated")
        broken = [r for r in run_all(chosen, jobs, mutate=False) if r.verdict != "passes"]
        if broken:
            print_table(broken)
            return 1
    print(f"planted bugs: {len(chosen)} mutations, {jobs} at a time")
    results = run_all(chosen, jobs, mutate=True)
    print()
    print_table(results)
    failed = [r for r in results if not r.ok]
    print(f"\n{len(results) - len(failed)}/{len(results)} caught in "
          f"{time.monotonic() - started:.0f} s")
    if failed:
        print("NOT caught: " + ", ".join(f"{r.mutation.name} ({r.verdict})" for r in failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
