"""OpenTelemetry tracing as a Hooks subclass: a PRODUCER span around each
enqueue, whose context travels in the job's payload envelope (W3C
traceparent in ``headers``), and a CONSUMER span for each run — a child of
the producer span (or, with ``link=True``, a new trace linked to it) — with
the job id, attempt, queue and outcome as attributes. Needs the optional
extra ``leasequeue[otel]`` (opentelemetry-api), imported only when
OpenTelemetryHooks is built; spans go wherever your SDK sends them."""

from __future__ import annotations

from typing import Any

from . import __version__
from .errors import ConfigError
from .hooks import EnqueueInfo, Hooks, Returned, RunEnd, RunInfo, Settled
from .models import EnqueuedJob

SYSTEM = "leasequeue"


def _otel() -> tuple[Any, Any, Any]:
    try:
        from opentelemetry import context, propagate, trace
    except ImportError as exc:
        raise ConfigError("tracing needs opentelemetry-api: "
                          "pip install 'leasequeue[otel]'") from exc
    return context, propagate, trace


class OpenTelemetryHooks(Hooks):
    """``app.add_hook(OpenTelemetryHooks())`` on the producer's App and on the
    worker's. The run's span is the current span while the handler runs (async
    handlers, and sync handlers in their thread), so spans the handler opens
    are its children."""

    def __init__(self, tracer_provider: Any = None, *, link: bool = False) -> None:
        self._context, self._propagate, self._trace = _otel()
        self._tracer = self._trace.get_tracer("leasequeue", __version__,
                                              tracer_provider=tracer_provider)
        self._link = link

    # -- producer --------------------------------------------------------------------

    def before_enqueue(self, job: EnqueueInfo) -> None:
        kind = self._trace.SpanKind.PRODUCER
        span = self._tracer.start_span(f"enqueue {job.name}", kind=kind, attributes={
            "messaging.system": SYSTEM, "messaging.operation.type": "send",
            "messaging.destination.name": job.queue, "messaging.message.id": job.job_id,
            "leasequeue.job": job.name, "leasequeue.correlation_id": job.correlation_id,
        })
        self._propagate.inject(job.headers, context=self._trace.set_span_in_context(span))
        job.state[self] = span

    def after_enqueue(self, job: EnqueueInfo, result: EnqueuedJob | None) -> None:
        span = job.state.pop(self, None)
        if span is None:
            return
        if result is None:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, "enqueue failed"))
        else:
            span.set_attribute("leasequeue.created", result.created)
            span.set_attribute("leasequeue.state", result.state)
        span.end()

    # -- consumer --------------------------------------------------------------------

    def before_run(self, run: RunInfo) -> None:
        trace = self._trace
        parent = self._propagate.extract(run.headers)
        links = []
        if self._link:
            producer = trace.get_current_span(parent).get_span_context()
            if producer.is_valid:
                links.append(trace.Link(producer))
            parent = self._context.Context()  # a new trace, linked to the producer's
        span = self._tracer.start_span(
            f"run {run.name}", context=parent, kind=trace.SpanKind.CONSUMER, links=links,
            attributes={
                "messaging.system": SYSTEM, "messaging.operation.type": "process",
                "messaging.destination.name": run.queue, "messaging.message.id": run.job_id,
                "leasequeue.job": run.name, "leasequeue.attempt": run.attempt,
                "leasequeue.token": run.token, "leasequeue.worker_id": run.worker_id,
                "leasequeue.correlation_id": run.correlation_id,
            })
        # current while the handler runs (this task; a sync handler's thread
        # gets a copy of this context), detached in after_run in the same task
        token = self._context.attach(trace.set_span_in_context(span))
        run.state[self] = (span, token)

    def after_run(self, run: RunInfo, returned: Returned) -> None:
        entry = run.state.get(self)
        if entry is None:
            return
        span, token = entry
        self._context.detach(token)
        run.state[self] = (span, None)
        if returned.exception is not None:
            span.record_exception(returned.exception)

    def on_settled(self, run: RunInfo, settled: Settled) -> None:
        entry = run.state.pop(self, None)
        if entry is None:
            return  # the run never started: no span
        span, token = entry
        if token is not None:  # after_run was not reached in this task
            span.set_attribute("leasequeue.detached_late", True)
        span.set_attribute("leasequeue.outcome", str(settled.end))
        if settled.kind:
            span.set_attribute("leasequeue.failure_kind", settled.kind)
        if settled.reason:
            span.set_attribute("leasequeue.reason", settled.reason)
        if settled.end in (RunEnd.RETRIED, RunEnd.DEAD, RunEnd.LOST):
            summary = settled.error.split("\n", 1)[0]
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, summary))
        span.end()
