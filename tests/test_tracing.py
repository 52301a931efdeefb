"""OpenTelemetry tracing through the hooks: the producer's trace context
travels in the payload envelope through a real Redis to a worker (another
App on the same prefix), and the run is a CONSUMER span, child of (or
linked to) the producer span, with the job's attributes and outcome. Spans
are read from the SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from leasequeue import App, Context, fixed
from leasequeue.tracing import OpenTelemetryHooks
from tests.harness.redis_proc import RedisProcess
from tests.helpers import eventually, worker_running

pytestmark = pytest.mark.anyio


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


@pytest.fixture
async def pair(redis_server: RedisProcess, prefix: str) -> AsyncIterator[tuple[App, App]]:
    """A producer App and a worker App: two clients, one Redis, one prefix."""
    producer = App(redis_server.url, prefix=prefix)
    worker = App(redis_server.url, prefix=prefix)
    yield producer, worker
    await producer.close()
    await worker.close()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def test_the_run_span_is_a_child_of_the_producer_span(
        pair: tuple[App, App], spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    producer, worker = pair
    provider, exporter = spans
    producer.add_hook(OpenTelemetryHooks(provider))
    worker.add_hook(OpenTelemetryHooks(provider))
    inner: dict[str, Any] = {}

    @worker.job
    async def charge(ctx: Context, amount: int) -> int:
        # the run span is current while the handler runs
        inner["span"] = trace.get_current_span().get_span_context()
        with provider.get_tracer("app").start_as_current_span("call bank"):
            pass
        return amount

    @worker.job
    def report(ctx: Context) -> None:  # a sync handler, in a worker thread
        with provider.get_tracer("app").start_as_current_span("render"):
            pass

    with provider.get_tracer("web").start_as_current_span("POST /charge") as request:
        await producer.enqueue("charge", {"amount": 5}, job_id="c1", queue="default")
        await producer.enqueue("report", job_id="r1", queue="default")
    async with worker_running(worker):
        await eventually(lambda: named(exporter, "run charge") and named(exporter, "run report"))

    (send,) = named(exporter, "enqueue charge")
    (run,) = named(exporter, "run charge")
    (bank,) = named(exporter, "call bank")
    assert send.kind is trace.SpanKind.PRODUCER and run.kind is trace.SpanKind.CONSUMER
    trace_id = request.get_span_context().trace_id
    assert send.context.trace_id == run.context.trace_id == trace_id
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert run.parent is not None and run.parent.span_id == send.context.span_id
    assert bank.parent is not None and bank.parent.span_id == run.context.span_id
    assert inner["span"].span_id == run.context.span_id
    attrs = dict(run.attributes or {})
    assert attrs["messaging.message.id"] == "c1"
    assert attrs["messaging.destination.name"] == "default"
    assert attrs["leasequeue.attempt"] == 1
    assert attrs["leasequeue.outcome"] == "succeeded"
    (render,) = named(exporter, "render")
    (report_run,) = named(exporter, "run report")
    assert render.parent is not None and render.parent.span_id == report_run.context.span_id


async def test_failures_are_recorded_on_the_run_span(
        pair: tuple[App, App], spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    producer, worker = pair
    provider, exporter = spans
    producer.add_hook(OpenTelemetryHooks(provider))
    worker.add_hook(OpenTelemetryHooks(provider))

    @worker.job(max_attempts=2, backoff=fixed(0))
    async def broken(ctx: Context) -> None:
        raise ValueError("card declined")

    await producer.enqueue("broken", job_id="b1", queue="default")
    async with worker_running(worker):
        await eventually(lambda: len(named(exporter, "run broken")) == 2)
    runs = sorted(named(exporter, "run broken"),
                  key=lambda s: dict(s.attributes or {})["leasequeue.attempt"])
    (send,) = named(exporter, "enqueue broken")
    assert [dict(s.attributes or {})["leasequeue.outcome"] for s in runs] == ["retried", "dead"]
    assert dict(runs[1].attributes or {})["leasequeue.reason"] == "max-attempts"
    for span in runs:  # every attempt is a child of the one producer span
        assert span.parent is not None and span.parent.span_id == send.context.span_id
        assert span.status.status_code is trace.StatusCode.ERROR
        assert [e.name for e in span.events] == ["exception"]


async def test_link_mode_starts_a_new_trace_linked_to_the_producer(
        pair: tuple[App, App], spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    producer, worker = pair
    provider, exporter = spans
    producer.add_hook(OpenTelemetryHooks(provider))
    worker.add_hook(OpenTelemetryHooks(provider, link=True))

    @worker.job
    async def ping(ctx: Context) -> None:
        return None

    await producer.enqueue("ping", job_id="p1", queue="default")
    async with worker_running(worker):
        await eventually(lambda: named(exporter, "run ping"))
    (send,) = named(exporter, "enqueue ping")
    (run,) = named(exporter, "run ping")
    assert run.parent is None and run.context.trace_id != send.context.trace_id
    assert [link.context.span_id for link in run.links] == [send.context.span_id]


async def test_a_job_enqueued_without_tracing_runs_in_a_root_span(
        pair: tuple[App, App], spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    producer, worker = pair  # the producer has no hooks: no context in the envelope
    provider, exporter = spans
    worker.add_hook(OpenTelemetryHooks(provider))

    @worker.job
    async def ping(ctx: Context) -> None:
        return None

    await producer.enqueue("ping", job_id="p2", queue="default")
    async with worker_running(worker):
        await eventually(lambda: named(exporter, "run ping"))
    (run,) = named(exporter, "run ping")
    assert run.parent is None and not named(exporter, "enqueue ping")
