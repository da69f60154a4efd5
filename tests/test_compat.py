"""_compat: the one place that knows pydantic-ai 1.x from 2.x."""

from __future__ import annotations

import dataclasses
import warnings

import pydantic_ai.messages as m
import pytest
from pydantic_ai.messages import ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RunUsage

from pydantic_ai_history import _compat


def test_feature_detection_matches_the_installed_version() -> None:
    major = int(_compat.pydantic_ai_version().split('.')[0])
    assert (_compat.RETRY_FEEDBACK_PART is not None) == (major >= 2)
    assert (_compat.COMPACTION_PART is not None) == hasattr(m, 'CompactionPart')
    assert (_compat.FILE_PART is not None) == hasattr(m, 'FilePart')
    assert _compat.NATIVE_TOOL_CALL_PARTS
    assert _compat.NATIVE_TOOL_RETURN_PARTS
    if major >= 2:
        assert _compat.HAS_CAPABILITIES


def test_answered_call_id() -> None:
    assert _compat.answered_call_id(ToolReturnPart(tool_name='f', content='x', tool_call_id='c1')) == 'c1'
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        tool_retry = m.RetryPromptPart(content='bad', tool_name='f', tool_call_id='c2')
        output_retry = m.RetryPromptPart(content='bad output')
    assert _compat.answered_call_id(tool_retry) == 'c2'
    assert _compat.answered_call_id(output_retry) is None  # has an auto id but answers no call
    assert _compat.answered_call_id(UserPromptPart(content='hi')) is None


def test_make_request_sets_only_supported_fields() -> None:
    request = _compat.make_request([UserPromptPart(content='hi')], run_id='run-1', metadata={'k': 1})
    assert isinstance(request, ModelRequest)
    fields = {f.name for f in dataclasses.fields(ModelRequest)}
    assert getattr(request, 'run_id', None) == ('run-1' if 'run_id' in fields else None)
    assert _compat.message_metadata(request) == ({'k': 1} if 'metadata' in fields else {})


def test_part_metadata_roundtrip() -> None:
    part = ToolReturnPart(tool_name='f', content='x', tool_call_id='c1')
    tagged = _compat.with_part_metadata(part, {'ours': True})
    assert part is not tagged or 'metadata' not in {f.name for f in dataclasses.fields(part)}
    if 'metadata' in {f.name for f in dataclasses.fields(ToolReturnPart)}:
        assert _compat.part_metadata(tagged) == {'ours': True}
        assert _compat.part_metadata(part) == {}
    else:
        assert _compat.part_metadata(tagged) == {}
    plain = UserPromptPart(content='hi')
    assert _compat.with_part_metadata(plain, {'x': 1}) is plain


@pytest.mark.parametrize('ctx', [object(), None])
def test_run_id_of_without_run_id(ctx: object) -> None:
    assert _compat.run_id_of(ctx) is None


def test_bound_durable_operation_reads_the_field_pydantic_ai_installs() -> None:
    """The one private pydantic-ai field the package reads: this fails when pydantic-ai renames it or changes
    its keys, where durable operations exist (2.x); before them nothing is ever bound."""
    from pydantic_ai import RunContext

    try:
        from pydantic_ai.capabilities import durable_operation  # noqa: F401
    except ImportError:
        assert not any(f.name == '_durable_operations' for f in dataclasses.fields(RunContext))
        return
    field = next(f for f in dataclasses.fields(RunContext) if f.name == '_durable_operations')
    assert 'tuple[str, str]' in str(field.type)
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    assert not _compat.bound_durable_operation(ctx, 'history', 'store_write')
    ctx = dataclasses.replace(ctx, _durable_operations={('history', 'store_write'): object()})
    assert _compat.bound_durable_operation(ctx, 'history', 'store_write')
    assert not _compat.bound_durable_operation(ctx, 'other', 'store_write')
