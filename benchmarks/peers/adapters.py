"""One adapter per package under comparison: its own token estimator and its comparable compaction setup.

Each adapter imports its package lazily, so this module loads in every venv; a venv only ever uses its own.
"Comparable setup" everywhere: compaction triggers at `max_tokens` (80% of the window) and aims at
`target_tokens` (a third of that), summarizing with the same `FunctionModel` summarizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import version
from typing import Any

from pydantic_ai.messages import ModelMessage

__all__ = ('ADAPTERS', 'VENV', 'Adapter')


class Adapter:
    key: str
    label: str
    distribution: str
    estimator: str
    setup: str = ''

    def version(self) -> str:
        slim = version('pydantic-ai-slim')
        return f'{self.distribution} {version(self.distribution)} (pydantic-ai-slim {slim})'

    def estimate(self, messages: Sequence[ModelMessage]) -> int:
        raise NotImplementedError

    def capabilities(self, *, window: int, max_tokens: int, target_tokens: int, summarizer: Any) -> list[Any]:
        raise NotImplementedError


class Ours(Adapter):
    key = 'ours'
    label = 'pydantic-ai-history'
    distribution = 'pydantic-ai-history'
    estimator = (
        "TokenCounter('openai:gpt-4o').estimate(messages).total (o200k, anchored only on verified usage)"
    )

    def __init__(self) -> None:
        self._counter: Any = None

    def estimate(self, messages: Sequence[ModelMessage]) -> int:
        if self._counter is None:  # one counter per adapter: its memo is part of what is measured
            from pydantic_ai_history import TokenCounter

            self._counter = TokenCounter('openai:gpt-4o')
        return self._counter.estimate(messages).total

    def capabilities(self, *, window: int, max_tokens: int, target_tokens: int, summarizer: Any) -> list[Any]:
        return [self._processor(window, max_tokens, target_tokens, summarizer, artifacts=True)]

    def _processor(
        self, window: int, max_tokens: int, target_tokens: int, summarizer: Any, *, artifacts: bool
    ) -> Any:
        from pydantic_ai_history import ContextPolicy, SummarizerSettings, create_history_processor

        self.setup = (
            f'create_history_processor(policy=ContextPolicy(context_window=W, max_tokens={max_tokens}, '
            f'target_tokens={target_tokens}), summarizer=SummarizerSettings(model=FunctionModel)'
            + ('' if artifacts else ', artifacts=False')
            + ')'
        )
        return create_history_processor(
            policy=ContextPolicy(context_window=window, max_tokens=max_tokens, target_tokens=target_tokens),
            summarizer=SummarizerSettings(model=summarizer),
            artifacts=artifacts,
        )


class OursCompactor(Ours):
    """Ours with the artifact planner off, so the request that crosses the trigger is always a compaction
    (with the planner on, reducing old large tool outputs often brings the history under the trigger)."""

    key = 'ours-compactor'
    label = 'pydantic-ai-history (artifacts=False)'

    def capabilities(self, *, window: int, max_tokens: int, target_tokens: int, summarizer: Any) -> list[Any]:
        return [self._processor(window, max_tokens, target_tokens, summarizer, artifacts=False)]


class Harness(Adapter):
    key = 'harness'
    label = 'pydantic-ai-harness'
    distribution = 'pydantic-ai-harness'
    estimator = 'compaction.estimate_context_tokens(messages) (newest usage.input_tokens + chars/4 after it)'

    def estimate(self, messages: Sequence[ModelMessage]) -> int:
        from pydantic_ai_harness.compaction import estimate_context_tokens

        return estimate_context_tokens(messages)

    def capabilities(self, *, window: int, max_tokens: int, target_tokens: int, summarizer: Any) -> list[Any]:
        from pydantic_ai_harness.compaction import SummarizingCompaction

        self.setup = (
            f'SummarizingCompaction(model=FunctionModel, max_tokens={max_tokens}, '
            f'keep_tokens={target_tokens})'
        )
        return [SummarizingCompaction(model=summarizer, max_tokens=max_tokens, keep_tokens=target_tokens)]


def _o200k_len() -> Any:
    """`len(encode_ordinary(text))` with o200k: the tokenizer callable harness's `tokenizer=` documents."""
    import tiktoken

    encoding = tiktoken.get_encoding('o200k_base')
    return lambda text: len(encoding.encode_ordinary(text))


class HarnessTokenizer(Harness):
    """harness with its documented `tokenizer=` option set to o200k (its most accurate configuration)."""

    key = 'harness-o200k'
    label = 'pydantic-ai-harness + tokenizer=o200k'
    estimator = (
        'compaction.estimate_context_tokens(messages, tokenizer=o200k) (newest usage + o200k after it)'
    )

    def __init__(self) -> None:
        self.tokenizer = _o200k_len()

    def estimate(self, messages: Sequence[ModelMessage]) -> int:
        from pydantic_ai_harness.compaction import estimate_context_tokens

        return estimate_context_tokens(messages, self.tokenizer)

    def capabilities(self, *, window: int, max_tokens: int, target_tokens: int, summarizer: Any) -> list[Any]:
        from pydantic_ai_harness.compaction import SummarizingCompaction

        self.setup = (
            f'SummarizingCompaction(model=FunctionModel, max_tokens={max_tokens}, '
            f'keep_tokens={target_tokens}, tokenizer=o200k)'
        )
        return [
            SummarizingCompaction(
                model=summarizer, max_tokens=max_tokens, keep_tokens=target_tokens, tokenizer=self.tokenizer
            )
        ]


class Summarization(Adapter):
    key = 'summarization'
    label = 'summarization-pydantic-ai SummarizationCapability'
    distribution = 'summarization-pydantic-ai'
    estimator = 'count_tokens_approximately(messages) (chars/4)'

    def estimate(self, messages: Sequence[ModelMessage]) -> int:
        from pydantic_ai_summarization import count_tokens_approximately

        return count_tokens_approximately(messages)

    def capabilities(self, *, window: int, max_tokens: int, target_tokens: int, summarizer: Any) -> list[Any]:
        from pydantic_ai_summarization import SummarizationCapability

        self.setup = (
            f"SummarizationCapability(trigger=('tokens', {max_tokens}), keep=('tokens', {target_tokens}), "
            'model=FunctionModel)'
        )
        return [
            SummarizationCapability(
                trigger=('tokens', max_tokens), keep=('tokens', target_tokens), model=summarizer
            )
        ]


class SummarizationContextManager(Summarization):
    """The README's recommended capability: `ContextManagerCapability(max_tokens=...)`, its defaults otherwise
    (keep nothing but the in-flight request); the threshold is set so it triggers where the others do."""

    key = 'summarization-cm'
    label = 'summarization-pydantic-ai ContextManagerCapability'

    def capabilities(self, *, window: int, max_tokens: int, target_tokens: int, summarizer: Any) -> list[Any]:
        from pydantic_ai_summarization import ContextManagerCapability

        threshold = min(max_tokens / window, 1.0)
        self.setup = (
            f'ContextManagerCapability(max_tokens={window}, compress_threshold={threshold:.3g}, '
            'summarization_model=FunctionModel) (default keep: the in-flight request only)'
        )
        return [
            ContextManagerCapability(
                max_tokens=window, compress_threshold=threshold, summarization_model=summarizer
            )
        ]


class SummarizationProcessHistory(Summarization):
    """`SummarizationProcessor` as a history processor through pydantic-ai's `ProcessHistory` capability,
    which writes the compacted history back to the run (`SummarizationCapability` does not)."""

    key = 'summarization-ph'
    label = 'summarization-pydantic-ai ProcessHistory(SummarizationProcessor)'

    def capabilities(self, *, window: int, max_tokens: int, target_tokens: int, summarizer: Any) -> list[Any]:
        from pydantic_ai.capabilities import ProcessHistory
        from pydantic_ai_summarization import SummarizationProcessor

        self.setup = (
            f"ProcessHistory(SummarizationProcessor(model=FunctionModel, trigger=('tokens', {max_tokens}), "
            f"keep=('tokens', {target_tokens})))"
        )
        processor = SummarizationProcessor(
            model=summarizer, trigger=('tokens', max_tokens), keep=('tokens', target_tokens)
        )
        return [ProcessHistory(processor)]


ADAPTERS: dict[str, type[Adapter]] = {
    a.key: a
    for a in (
        Ours,
        OursCompactor,
        Harness,
        HarnessTokenizer,
        Summarization,
        SummarizationContextManager,
        SummarizationProcessHistory,
    )
}
# The venv each variant runs in (harness pins its own pydantic-ai-slim).
VENV: dict[str, str] = {
    'ours': 'ours',
    'ours-compactor': 'ours',
    'harness': 'harness',
    'harness-o200k': 'harness',
    'summarization': 'summarization',
    'summarization-cm': 'summarization',
    'summarization-ph': 'summarization',
}
