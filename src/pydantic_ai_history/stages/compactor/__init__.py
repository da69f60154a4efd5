"""The compactor stage: summarize the older part of a long history with an LLM, incrementally and cached.

`Compactor(CompactionSettings(...))` is a `HistoryStage`; `await compactor.compact_history(messages, context,
focus=...)` compacts on demand. Pinned units are never summarized: those evicted are carried verbatim in a
part of the summary message of their own, under `PINNED_HEADING`. With `CompactionSettings(method='provider')`
the serving model's own compaction (`Model.compact_messages`, pydantic-ai 2.x) stands in for the LLM summary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from ...pipeline._compaction_tool import CompactionTool
    from ._prompt import DEFAULT_INSTRUCTIONS, SECTIONS
    from ._settings import CompactionSettings
    from ._stage import Compactor
    from ._summary_message import (
        PINNED_HEADING,
        SummarySections,
        build_summary_message,
        summary_sections,
        summary_text,
    )

__all__ = (
    'DEFAULT_INSTRUCTIONS',
    'PINNED_HEADING',
    'SECTIONS',
    'CompactionSettings',
    'CompactionTool',
    'Compactor',
    'SummarySections',
    'build_summary_message',
    'summary_sections',
    'summary_text',
)

_EXPORTS = {
    'CompactionSettings': '._settings',
    'CompactionTool': '...pipeline._compaction_tool',
    'Compactor': '._stage',
    'DEFAULT_INSTRUCTIONS': '._prompt',
    'PINNED_HEADING': '._summary_message',
    'SECTIONS': '._prompt',
    'SummarySections': '._summary_message',
    'build_summary_message': '._summary_message',
    'summary_sections': '._summary_message',
    'summary_text': '._summary_message',
}

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
