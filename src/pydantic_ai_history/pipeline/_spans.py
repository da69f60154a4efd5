"""The processor's spans, opened only once a request does something (most change nothing, and a span each
would crowd every trace): when a stage opens a span of its own, or, after the fact, changed the history."""

from __future__ import annotations

from contextvars import Token
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from ..messages._clock import wall

if TYPE_CHECKING:
    from ..context._context import HistoryContext
    from ..events import RequestProcessed


PROCESS_SPAN = 'pydantic_ai_history.process'


def _now_ns() -> int:
    return int(wall() * 1e9)  # the package's clock: pinned inside a durable workflow


class DeferredSpans:
    """The spans of one request: the request's, and the running stage's, opened on first need."""

    def __init__(self, tracer: Any, *, started_ns: int | None = None) -> None:
        self._tracer = tracer
        self._started = _now_ns() if started_ns is None else started_ns
        self._process: Any = None
        self._process_token: Token[otel_context.Context] | None = None
        self._stage: tuple[str, int] | None = None
        self._stage_span: Any = None
        self._stage_token: Token[otel_context.Context] | None = None

    def stage_started(self, name: str) -> None:
        self._stage = (f'pydantic_ai_history.{name}', _now_ns())

    def open(self) -> None:
        """Open the request's span and the running stage's (with the times they began); make them current."""
        if self._process is None:
            self._process = self._tracer.start_span(PROCESS_SPAN, start_time=self._started)
            self._process_token = otel_context.attach(trace.set_span_in_context(self._process))
        if self._stage is not None and self._stage_span is None:
            name, started = self._stage
            self._stage_span = self._tracer.start_span(name, start_time=started)
            self._stage_token = otel_context.attach(trace.set_span_in_context(self._stage_span))

    def stage_finished(self, changed: bool) -> None:
        """End the stage's span; one that changed the history gets its span now if it had none."""
        if changed:
            self.open()
        if self._stage_span is not None and self._stage_token is not None:
            otel_context.detach(self._stage_token)
            self._stage_span.end()
        self._stage, self._stage_span, self._stage_token = None, None, None

    def finish(self, changed: bool, attributes: dict[str, Any]) -> None:
        """End the request's span (opened now if the history changed), with the request's figures."""
        if changed:
            self.open()
        if self._process is not None and self._process.is_recording():
            self._process.set_attributes(attributes)
        self.close()

    def close(self) -> None:
        """End whatever is still open (a request that raised); idempotent."""
        if self._stage_span is not None:
            self.stage_finished(changed=False)
        if self._process is not None and self._process_token is not None:
            otel_context.detach(self._process_token)
            self._process.end()
            self._process, self._process_token = None, None


def request_attributes(event: RequestProcessed, context: HistoryContext) -> dict[str, Any]:
    """The request span's attributes: what the request changed, and for which run and model."""
    attributes = {
        'messages_before': event.messages_before,
        'messages_after': event.messages_after,
        'tokens_before': event.tokens_before,
        'tokens_after': event.tokens_after,
        'anchored': event.anchored,
        'duration_ms': event.duration_ms,
        'prefix_rewrite.messages': event.rewritten_messages,
        'prefix_rewrite.tokens': event.rewritten_tokens,
        'prefix_rewrite.by': event.rewritten_by,
        'context_window': context.context_window,
        'run_id': context.run_id,
        'model': context.counter.model_name or None,
    }
    return {f'pydantic_ai_history.{name}': value for name, value in attributes.items() if value is not None}
