"""Keep PydanticAI agents inside their context window without breaking their conversations.

`create_history_processor()` returns the processor: a pydantic-ai capability (`Agent(capabilities=[...])`)
and a history processor (`Agent(history_processors=[...])` on early 1.x). Its settings have one home each:
`ContextPolicy` (window, budget, trigger, target), `SummarizerSettings` (every LLM call), and the stages' own
`ArtifactSettings` and `CompactionSettings`. `HistoryStage`, `HistoryContext` and `ContextLimits` are for
custom stages (see docs/settings.md, "A custom stage").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

if TYPE_CHECKING:
    from .budget._policy import ContextLimits, ContextPolicy
    from .budget.model_info import ContextWindowUnknownError
    from .budget.notice import NearLimitNotice
    from .context._context import HistoryContext, HistoryStage
    from .context._summarizer_settings import SummarizerSettings
    from .events import (
        ArtifactProcessed,
        BackgroundSummaryDiscarded,
        BackgroundSummaryStarted,
        BackgroundSummaryUsed,
        CompactionResult,
        ContentLost,
        HistoryEvent,
        HistoryWarning,
        NearLimitNoticeSent,
        PassagesRecalled,
        RequestProcessed,
        StageFailed,
        WarningKind,
        WindowApplied,
    )
    from .files import FileSettings
    from .messages.pinning import PinPredicate, pin, pin_tool_errors
    from .messages.validate import HistoryValidationError, Violation, assert_valid_history, validate_history
    from .pipeline._compaction_tool import CompactionTool
    from .processor import HistoryProcessor, create_history_processor
    from .stages.artifacts import ArtifactPlanner, ArtifactSettings
    from .stages.compactor import CompactionSettings, Compactor
    from .stages.window import SlidingWindow
    from .tokens import TokenCounter, TokenizerProfile

__all__ = (
    'ArtifactPlanner',
    'ArtifactProcessed',
    'ArtifactSettings',
    'BackgroundSummaryDiscarded',
    'BackgroundSummaryStarted',
    'BackgroundSummaryUsed',
    'CompactionResult',
    'CompactionSettings',
    'CompactionTool',
    'Compactor',
    'ContentLost',
    'ContextLimits',
    'ContextPolicy',
    'ContextWindowUnknownError',
    'FileSettings',
    'HistoryContext',
    'HistoryEvent',
    'HistoryProcessor',
    'HistoryStage',
    'HistoryValidationError',
    'HistoryWarning',
    'NearLimitNotice',
    'NearLimitNoticeSent',
    'PassagesRecalled',
    'PinPredicate',
    'RequestProcessed',
    'SlidingWindow',
    'StageFailed',
    'SummarizerSettings',
    'TokenCounter',
    'TokenizerProfile',
    'Violation',
    'WarningKind',
    'WindowApplied',
    'assert_valid_history',
    'create_history_processor',
    'pin',
    'pin_tool_errors',
    'validate_history',
)

__version__ = '0.1.0'

_EXPORTS = {
    'ArtifactPlanner': '.stages.artifacts',
    'ArtifactProcessed': '.events',
    'ArtifactSettings': '.stages.artifacts',
    'BackgroundSummaryDiscarded': '.events',
    'BackgroundSummaryStarted': '.events',
    'BackgroundSummaryUsed': '.events',
    'CompactionResult': '.events',
    'CompactionSettings': '.stages.compactor',
    'CompactionTool': '.pipeline._compaction_tool',
    'Compactor': '.stages.compactor',
    'ContentLost': '.events',
    'ContextLimits': '.budget._policy',
    'ContextPolicy': '.budget._policy',
    'ContextWindowUnknownError': '.budget.model_info',
    'FileSettings': '.files',
    'HistoryContext': '.context._context',
    'HistoryEvent': '.events',
    'HistoryProcessor': '.processor',
    'HistoryStage': '.context._context',
    'HistoryValidationError': '.messages.validate',
    'HistoryWarning': '.events',
    'NearLimitNotice': '.budget.notice',
    'NearLimitNoticeSent': '.events',
    'PassagesRecalled': '.events',
    'PinPredicate': '.messages.pinning',
    'RequestProcessed': '.events',
    'SlidingWindow': '.stages.window',
    'StageFailed': '.events',
    'SummarizerSettings': '.context._summarizer_settings',
    'TokenCounter': '.tokens',
    'TokenizerProfile': '.tokens',
    'Violation': '.messages.validate',
    'WarningKind': '.events',
    'WindowApplied': '.events',
    'assert_valid_history': '.messages.validate',
    'create_history_processor': '.processor',
    'pin': '.messages.pinning',
    'pin_tool_errors': '.messages.pinning',
    'validate_history': '.messages.validate',
}
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
