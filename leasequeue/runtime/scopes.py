"""The cancel scopes the runtime makes per run and per claim: the asyncio
backend's own class, made directly.

``anyio.CancelScope()`` looks the backend up and runs a second ``__init__``
each time; on asyncio it makes an instance of this very class. A shielded
scope entered and left cost 29,240 client instructions that way and 19,476
made directly (callgrind, 5,000 of each; DESIGN-NOTES.md, "The
claimer's shielded scopes"). A worker runs on asyncio only (redis.asyncio
needs it), uvloop included."""

from __future__ import annotations

from typing import Any

from anyio import CancelScope

new_scope: type[CancelScope]
try:
    from anyio._backends._asyncio import CancelScope as _AsyncioScope

    new_scope = _AsyncioScope
except ImportError:  # pragma: no cover - another anyio layout: the public class
    new_scope = CancelScope

task_states: Any  # each task's anyio state (its current scope): RunScopes reads it
try:
    from anyio._backends._asyncio import _task_states as task_states
except ImportError:  # pragma: no cover - another anyio layout: a scope per run
    task_states = {}
