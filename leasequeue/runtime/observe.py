"""What the hooks are told of a settling write's answer: the executor's
replies (fail, release) translated into a Settled. No I/O, no hooks called
here (the executor calls them)."""

from __future__ import annotations

from ..hooks import SETTLED, RunEnd, Settled
from ..store.specs import FailReply, ReleaseReply
from .handler import Outcome


def failed(code: FailReply | None, kind: str, outcome: Outcome) -> Settled:
    """What the hooks are told of a fail write's answer (None: it never landed)."""
    if code is None or code is FailReply.REFUSED:
        return Settled(RunEnd.LOST, kind=kind, error=outcome.error, exception=outcome.exception)
    if code is FailReply.CANCELED:
        return Settled(RunEnd.CANCELED, kind=kind, error=outcome.error,
                       exception=outcome.exception)
    if code is FailReply.DEAD:
        reason = outcome.reason or {"work": "max-attempts", "infra": "max-infra-attempts"}.get(
            kind, kind)
        return Settled(RunEnd.DEAD, kind=kind, reason=reason, error=outcome.error,
                       exception=outcome.exception)
    return Settled(RunEnd.RETRIED, kind=kind, error=outcome.error, exception=outcome.exception)


def released_as(answer: ReleaseReply | None, why: str) -> Settled:
    """A release's answer (None: it never landed)."""
    if answer is None or answer is ReleaseReply.REFUSED:
        return SETTLED[RunEnd.LOST]
    if answer is ReleaseReply.CANCELED:
        return Settled(RunEnd.CANCELED, reason=why)
    return Settled(RunEnd.RELEASED, reason=why)
