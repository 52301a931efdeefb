"""Automatic garbage collection held off while a batch is prepared.

Preparing N jobs (``Producer.prepare_many``) makes about 2N container
objects that all stay alive (each job and its queue), on top of the
caller's N requests. CPython collects by counting such allocations: one
young-generation pass per 700, and every tenth of those an older one, each
promoting what survives; once enough has been promoted, a full collection
walks every object in the process. Six 20,000-job ``enqueue_many`` calls
in a process of 45,000 objects (benchmarks/gc_bulk.py, 2026-12-01, twice):
74-79 young passes a call, and a full collection of 20-31 ms (of a 112-155
ms call) in five calls of the six; with the hold, 25-27 young passes (the
answers') and a full collection (24-36 ms) in two of the six. None of
these objects can be in a cycle: refcounting frees them when the caller
drops the batch.

While held, the allocations of the preparation trigger nothing; the
first allocation after it makes one young pass over what survived. The
hold covers synchronous code only (no await inside it): no other task of
the event loop runs meanwhile, and another thread merely allocates without
triggering a collection for that long, as during any long call into C.
Collection is turned back on only where it was on when the outermost hold
began (a program that turned it off keeps it off); holds nest, and across
threads the last one out turns it back on."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_holders = 0
_was_enabled = False


@contextmanager
def collection_held() -> Iterator[None]:
    """Automatic collection off for the block (see the module's docstring)."""
    global _holders, _was_enabled
    with _lock:
        if _holders == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _was_enabled:
                gc.enable()
