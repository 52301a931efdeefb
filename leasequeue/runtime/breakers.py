"""The worker's side of circuit breakers: before a run of a job that lists
breakers starts, ask each one (lua/breaker_check.lua); hold the run back
when one is open (the executor puts it back, due when the breaker
half-opens, no attempt spent); after the run, report its outcome (an
infrastructure failure counts toward tripping; a probe's verdict closes or
re-opens). It never settles jobs and never changes a run's phase."""

from __future__ import annotations

from ..breaker import Admission, Breaker
from ..errors import RedisUnavailable, ScriptError
from ..log import get_log
from ..registry import JobDefinition
from .handler import Ending, Outcome
from .runs import RunRecord

# a breaker whose Redis does not answer holds the run back this long (a
# Redis outage counts as "open", never as "go ahead", like the limiter)
UNREACHABLE_WAIT = 1.0


def run_holder(run: RunRecord, worker_id: str) -> str:
    """Who passes a breaker: one run (job id and token) on one worker."""
    return f"{run.job.id}:{run.job.token}@{worker_id}"


def verdict(outcome: Outcome) -> str:
    """failure | success | release: what a run's outcome tells its breakers.
    Only an infrastructure failure of the handler counts against the
    dependency; a work failure means it answered; a stop says nothing."""
    if outcome.ending is Ending.INFRA:
        return "failure"
    if outcome.ending is Ending.DEAD and outcome.reason == "bad-payload":
        return "release"  # the handler never ran: it says nothing of the dependency
    if outcome.ending in (Ending.SUCCEEDED, Ending.WORK, Ending.DEAD):
        return "success"
    return "release"


class BreakerGate:
    def __init__(self, worker_id: str) -> None:
        self._worker_id = worker_id
        self._probes: dict[tuple[str, str, int], list[Breaker]] = {}  # run -> breakers it probes
        self._log = get_log("breakers", worker_id=worker_id)

    async def admit(self, run: RunRecord, definition: JobDefinition) -> float | None:
        """None: the run may start (as the probe of the breakers that were
        half-open). Else the seconds to hold it back (the earliest moment one
        of its open breakers lets a run through again)."""
        holder = run_holder(run, self._worker_id)
        for breaker in definition.breakers:
            try:
                # the probe holds its turn for the breaker's probe_lease: a probe
                # that crashed lets the next one through after that
                admission: Admission = await breaker.check(holder)
            except (RedisUnavailable, ScriptError) as exc:
                self._log.warning("breaker unreachable: run held back", breaker=breaker.name,
                                  error=str(exc), **run.fields())
                await self.done(run, definition, "release")
                return UNREACHABLE_WAIT
            if not admission.go:
                await self.done(run, definition, "release")
                run.ctx.log.info("held back: breaker open", breaker=breaker.name,
                                 retry_in_s=admission.wait)
                return admission.wait
            if admission.probe:
                self._probes.setdefault(run.key, []).append(breaker)
        return None

    async def done(self, run: RunRecord, definition: JobDefinition, outcome: str) -> None:
        """Report how the run ended: every breaker counts a failure; the
        breakers it probed learn the verdict (or get their turn back)."""
        probed = self._probes.pop(run.key, [])
        for breaker in definition.breakers:
            if outcome != "failure" and breaker not in probed:
                continue
            try:
                await breaker.record(run_holder(run, self._worker_id), outcome)
            except (RedisUnavailable, ScriptError) as exc:
                self._log.warning("breaker outcome not recorded", breaker=breaker.name,
                                  outcome=outcome, error=str(exc), **run.fields())
