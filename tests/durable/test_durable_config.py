"""Under a durability capability the processor refuses, when the agent is built, a store workers cannot share."""

from __future__ import annotations

import pytest

# pydantic-ai raises a plain ImportError (not ModuleNotFoundError) when the dbos package is missing: say so, or
# pytest 9 reports it as a collection error instead of a skip.
pytest.importorskip(
    'pydantic_ai.durable_exec.dbos',
    reason='durable execution needs pydantic-ai 2.x with dbos',
    exc_type=ImportError,
)

from pydantic_ai import Agent
from pydantic_ai.durable_exec.dbos import DBOSDurability
from pydantic_ai.exceptions import UserError
from pydantic_ai.models.test import TestModel

from pydantic_ai_history import HistoryProcessor
from pydantic_ai_history.pipeline._operations import OPERATION_NAMES
from pydantic_ai_history.store import DirectoryStore, MemoryStore


def test_memory_store_is_refused(tmp_path) -> None:
    with pytest.raises(UserError, match=r'DirectoryStore.*RedisStore'):
        Agent(TestModel(), name='a', capabilities=[HistoryProcessor(store=MemoryStore()), DBOSDurability()])


def test_store_without_explicit_secret_is_refused(tmp_path) -> None:
    with pytest.raises(UserError, match='explicit id secret'):
        Agent(
            TestModel(),
            name='b',
            capabilities=[HistoryProcessor(store=DirectoryStore(tmp_path)), DBOSDurability()],
        )


def test_shared_store_with_secret_is_accepted_and_operations_are_named(tmp_path) -> None:
    processor = HistoryProcessor(store=DirectoryStore(tmp_path, secret='s' * 32))
    Agent(TestModel(), name='c', capabilities=[processor, DBOSDurability()])
    Agent(TestModel(), name='d', capabilities=[HistoryProcessor(store=MemoryStore())])  # no durability: fine
    from pydantic_ai.durable_exec._capability_operation import collect_capability_operations

    # persisted names: changing one strands every in-flight workflow
    assert sorted(collect_capability_operations(processor)) == sorted(OPERATION_NAMES)
    assert sorted(OPERATION_NAMES) == sorted(
        [
            'artifact_plan',
            'artifact_summary',
            'cache_read',
            'cache_write',
            'chunk_merge',
            'compaction_summary',
            'context_window_probe',
            'file_conversion',
            'store_search',
            'store_write',
        ]
    )
