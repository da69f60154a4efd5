"""_compat: the one place that knows pydantic-ai 1.x from 2.x."""

from __future__ import annotations

import dataclasses
import warnings

import pydantic_ai.messages as m
import pytest
from pydantic_ai.messages import ModelRequest, ToolReturnPart, UserPromptPart

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
