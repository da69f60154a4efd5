"""One adapter per package under comparison: its own token estimator and its comparable compaction setup.

Each adapter imports its package lazily, so this module loads in every venv; a venv only ever uses its own.
"Comparable setup" everywhere: compaction triggers at `max_tokens` (80% of the window) and aims at
`target_tokens` (a third of that), summarizing with the same `FunctionModel` summarizer.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from importlib.metadata import version
from typing import Any

from pydantic_ai.messages import ModelMessage

__all__ = ('ADAPTERS', 'Adapter')


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

    def estimate(self, messages: Sequence[ModelMessage]) -> int:
        from pydantic_ai_history import TokenCounter

        return TokenCounter('openai:gpt-4o').estimate(messages).total

    def capabilities(self, *, window: int, max_tokens: int, target_tokens: int, summarizer: Any) -> list[Any]:
        from pydantic_ai_history import create_history_processor

        params = inspect.signature(create_history_processor).parameters
        kwargs: dict[str, Any] = {'context_window': window}
        if {'max_tokens', 'target_tokens', 'summarizer_model'} <= params.keys():
            kwargs.update(max_tokens=max_tokens, target_tokens=target_tokens, summarizer_model=summarizer)
            self.setup = (
                f'create_history_processor(context_window=W, max_tokens={max_tokens}, '
                f'target_tokens={target_tokens}, '
                'summarizer_model=FunctionModel)'
            )
        else:  # the compactor is not wired in yet: the sliding window alone
            self.setup = (
                'create_history_processor(context_window=W) (compactor not wired yet: sliding window only)'
            )
        return [create_history_processor(**kwargs).capability()]


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


class Summarization(Adapter):
    key = 'summarization'
    label = 'summarization-pydantic-ai'
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


ADAPTERS: dict[str, type[Adapter]] = {a.key: a for a in (Ours, Harness, Summarization)}
