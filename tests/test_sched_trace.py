"""benchmarks/sched_trace.py: the harness's record of where each bench's
processes ran, read from the kernel's scheduler events. The parsing and the
shares are checked here on a written trace, in the lines tracefs prints (no
tracefs needed); the harness runs them on a real one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import sched_trace  # (benchmarks/ is a folder of scripts, not a package)

# the harness starts the bench's leader 100, which forks a thread 101 and a
# worker process 200 (which execs); 300 is a process of someone else; redis-server is 50, read from
# /proc at 9.0 on CPU 0. Each line as tracefs prints it (split for length).
TRACE = "\n".join([
    "# tracer: nop",
    # the harness (90) starts the bench: the trace begins before the leader's fork
    "          python-90      [000] .....   9.400000: sched_process_fork: comm=python"
    " pid=90 child_comm=python child_pid=100",
    "          python-100     [000] .....   9.400100: sched_process_exec:"
    " filename=/usr/bin/python3 pid=100 old_pid=100",
    "          python-100     [001] .....  10.000000: sched_process_fork: comm=python"
    " pid=100 child_comm=python child_pid=101",
    "          python-100     [001] d..2.  10.000100: sched_wakeup_new: comm=python"
    " pid=101 prio=120 target_cpu=001",
    "          python-100     [001] .....  10.100000: sched_process_fork: comm=python"
    " pid=100 child_comm=python child_pid=200",
    "          python-100     [001] d..2.  10.100100: sched_wakeup_new: comm=python"
    " pid=200 prio=120 target_cpu=000",
    "          python-200     [000] .....  10.100200: sched_process_exec:"
    " filename=/usr/bin/python3 pid=200 old_pid=200",
    "            bash-300     [000] .....  10.200000: sched_process_fork: comm=bash"
    " pid=300 child_comm=bash child_pid=301",
    "            bash-301     [000] .....  10.200100: sched_process_exec:"
    " filename=/usr/bin/ls pid=301 old_pid=301",
    # a migration to the CPU it was on already is no change
    "     migration/0-18      [000] d..3.  10.300000: sched_migrate_task:"
    " comm=redis-server pid=50 prio=120 orig_cpu=0 dest_cpu=0",
    # tracefs with its irq-info option off prints no flags column
    "     migration/0-18      [000]  10.500000: sched_migrate_task:"
    " comm=redis-server pid=50 prio=120 orig_cpu=0 dest_cpu=1",
    "          python-200     [000] .....  10.800000: sched_process_exit: comm=python"
    " pid=200 prio=120",
])


def placement() -> sched_trace.Placement:
    return sched_trace.parse(TRACE, 100, {50: (9.0, 0), 100: (9.5, 1)})


def test_the_tree_holds_the_leaders_threads_and_processes_only() -> None:
    p = placement()
    assert p.tree == {100, 101, 200}
    assert p.execs == {100: 9.4001, 200: 10.1002, 301: 10.2001}
    assert p.exits == {200: 10.8}
    assert p.cpus[50] == ([9.0, 10.5], [0, 1])  # the move to its own CPU is no change


def test_a_share_is_the_time_two_tasks_spent_on_one_cpu_while_both_lived() -> None:
    p = placement()
    # redis on CPU 0 until 10.5, then 1; the leader on CPU 1 throughout
    assert p.share(100, 50, 10.2, 11.0) == pytest.approx(0.5 / 0.8, abs=1e-3)
    # the worker (CPU 0) lives until 10.8: with redis 10.2-10.5 of 10.2-10.8
    assert p.share(200, 50, 10.2, 11.0) == pytest.approx(0.5, abs=1e-3)
    # never both alive in the window: no share at all
    assert p.share(200, 50, 10.9, 11.0) is None
    assert p.share(100, 50, 10.6, 11.0) == 1.0


def test_the_worker_is_the_process_the_bench_started_not_the_bench_or_another() -> None:
    p = placement()  # the bench's own exec (9.4001) is never its own worker
    assert p.worker(10.2, 11.0) == 200
    assert p.worker(10.9, 11.0) is None  # it had exited


def test_a_probe_is_placed_by_where_its_three_tasks_were_as_it_ended() -> None:
    p = placement()
    # at 10.4: client 100 on 1, worker 200 on 0, redis on 0
    assert p.probe(100, 200, 50, 10.3, 10.4) == ("producer apart", [])
    # across 10.5 redis moved to CPU 1, beside the client
    assert p.probe(100, 200, 50, 10.45, 10.55) == ("worker apart", ["redis"])
    assert p.probe(100, 200, 50, 10.85, 10.9) == ("unknown", [])  # the worker had exited
    p.cpus[101] = ([10.0], [2])  # on a third CPU
    assert p.probe(101, 200, 50, 10.55, 10.6) == ("all apart", [])


def test_no_tracefs_means_no_placement_not_an_error(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(sched_trace, "TRACEFS", tmp_path / "file")  # no instances/ below
    assert sched_trace.SchedTrace(name="t").open() is False


def test_a_failed_open_leaves_what_it_did_not_make(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    theirs = tmp_path / "instances" / "taken"
    theirs.mkdir(parents=True)
    monkeypatch.setattr(sched_trace, "TRACEFS", tmp_path)
    trace = sched_trace.SchedTrace(name="taken")
    assert trace.open() is False  # the name is another harness's
    trace.close()
    assert theirs.is_dir()


def test_a_tid_used_again_is_a_new_task() -> None:
    # 301 exec'd (someone else's) and exited; the leader then forks a new 301
    again = "\n".join([
        TRACE,
        "            bash-301     [000] .....  10.900000: sched_process_exit: comm=ls"
        " pid=301 prio=120",
        "          python-100     [001] .....  11.000000: sched_process_fork: comm=python"
        " pid=100 child_comm=python child_pid=301",
        "          python-100     [001] d..2.  11.000100: sched_wakeup_new: comm=python"
        " pid=301 prio=120 target_cpu=000",
    ])
    p = sched_trace.parse(again, 100, {50: (9.0, 0)})
    assert 301 in p.tree and 301 not in p.execs and 301 not in p.exits
    assert p.worker(11.0, 11.5) is None  # a thread of the bench's, not a process it started
    assert p.cpus[301] == ([11.0001], [0])


def test_a_move_before_the_proc_read_is_put_in_order() -> None:
    # redis moved to CPU 1 at 10.5, and /proc was read at 10.6 (it said 1)
    p = sched_trace.parse(TRACE, 100, {50: (10.6, 1)})
    assert p.cpus[50] == ([10.5, 10.6], [1, 1])


def test_tracefs_is_mounted_where_it_is_not_and_the_harness_is_root(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # an unmounted tracefs: the directory is there, empty
    monkeypatch.setattr(sched_trace, "TRACEFS", tmp_path)
    monkeypatch.setattr(sched_trace.os, "geteuid", lambda: 0)
    calls: list[list[str]] = []

    def mount(argv: list[str], **_: object) -> subprocess.CompletedProcess[bytes]:
        calls.append(argv)
        (tmp_path / "instances").mkdir()  # what a mount makes appear
        return subprocess.CompletedProcess(argv, 0, b"", b"")

    monkeypatch.setattr(sched_trace.subprocess, "run", mount)
    assert sched_trace.mount_tracefs() is True
    assert calls == [["mount", "-t", "tracefs", "nodev", str(tmp_path)]]
    # mounted now: nothing more is tried
    assert sched_trace.mount_tracefs() is False
    assert len(calls) == 1


def test_tracefs_is_not_mounted_by_a_user_nor_where_the_mount_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sched_trace, "TRACEFS", tmp_path)
    calls: list[list[str]] = []

    def refused(argv: list[str], **_: object) -> subprocess.CompletedProcess[bytes]:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 32, b"", b"permission denied")

    monkeypatch.setattr(sched_trace.subprocess, "run", refused)
    monkeypatch.setattr(sched_trace.os, "geteuid", lambda: 1000)
    assert sched_trace.mount_tracefs() is False
    assert calls == []  # not root: not tried
    monkeypatch.setattr(sched_trace.os, "geteuid", lambda: 0)
    assert sched_trace.mount_tracefs() is False  # tried, refused
    assert len(calls) == 1
