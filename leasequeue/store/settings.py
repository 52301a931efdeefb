"""Knobs every script call passes along (stream caps, audit, batch sizes,
durable mode). Plain data."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class StoreSettings:
    """Knobs every script call passes along."""

    events_maxlen: int = 10_000
    audit_all: bool = False
    letters_maxlen: int = 10_000
    wake_cap: int = 64
    promote_batch: int = 100
    retention_ms: int = 24 * 3600 * 1000  # of canceled records
    durable_replicas: int = 0  # > 0: WAIT for that many replicas after enqueue and ack
    durable_timeout_ms: int = 1000
    expire_on_ack: int = 200  # most expired finished records each ack deletes
    dead_max: int = 100_000  # most dead jobs kept (the oldest are trimmed as jobs die)
    dead_retention_ms: int = 7 * 24 * 3600 * 1000  # dead jobs older than this are trimmed
    # how long a one-job enqueue may read its socket for the reply before it
    # waits on the event loop or blocks in recv (store/spin.py); 0 = never
    reply_spin_us: int = 50

    @property
    def audit_flag(self) -> str:
        """'1' when every transition goes to the audit stream, else '0' (a script argument)."""
        return "1" if self.audit_all else "0"




def with_durable(settings: StoreSettings, durable: bool, timeout: float) -> StoreSettings:
    """``settings`` for App(durable=..., durable_timeout=...): WAIT for at least
    one replica, ``timeout`` seconds at most."""
    if not durable:
        return settings
    return replace(settings, durable_replicas=max(1, settings.durable_replicas),
                   durable_timeout_ms=int(timeout * 1000))
