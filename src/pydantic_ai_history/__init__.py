"""Keep PydanticAI agents inside their context window without breaking their conversations.

`create_history_processor()` returns the processor: a pydantic-ai capability (`Agent(capabilities=[...])`)
and a history processor (`Agent(history_processors=[...])` on early 1.x). Its settings have one home each:
`ContextPolicy` (window, budget, trigger, target), `SummarizerSettings` (every LLM call), and the stages' own
`ArtifactSettings` and `CompactionSettings`. `HistoryStage`, `HistoryContext` and `ContextLimits` are for
custom stages (see the README's "A custom stage").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

if TYPE_CHECKING:
    from ._context import HistoryContext, HistoryStage
    from ._policy import ContextLimits, ContextPolicy
    from ._summarizer_settings import SummarizerSettings
    from .compaction_tool import CompactionTool
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
        RequestProcessed,
        StageFailed,
        WarningKind,
        WindowApplied,
    )
    from .factory import create_history_processor
    from .files import FileSettings
    from .model_info import ContextWindowUnknownError
    from .notice import NearLimitNotice
    from .pinning import PinPredicate, pin, pin_tool_errors
    from .processor import HistoryProcessor
    from .stages.artifacts import ArtifactPlanner, ArtifactSettings
    from .stages.compactor import CompactionSettings, Compactor
    from .stages.window import SlidingWindow
    from .tokens import TokenCounter, TokenizerProfile
    from .validate import HistoryValidationError, Violation, assert_valid_history, validate_history

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
    'CompactionTool': '.compaction_tool',
    'Compactor': '.stages.compactor',
    'ContentLost': '.events',
    'ContextLimits': '._policy',
    'ContextPolicy': '._policy',
    'ContextWindowUnknownError': '.model_info',
    'FileSettings': '.files',
    'HistoryContext': '._context',
    'HistoryEvent': '.events',
    'HistoryProcessor': '.processor',
    'HistoryStage': '._context',
    'HistoryValidationError': '.validate',
    'HistoryWarning': '.events',
    'NearLimitNotice': '.notice',
    'NearLimitNoticeSent': '.events',
    'PinPredicate': '.pinning',
    'RequestProcessed': '.events',
    'SlidingWindow': '.stages.window',
    'StageFailed': '.events',
    'SummarizerSettings': '._summarizer_settings',
    'TokenCounter': '.tokens',
    'TokenizerProfile': '.tokens',
    'Violation': '.validate',
    'WarningKind': '.events',
    'WindowApplied': '.events',
    'assert_valid_history': '.validate',
    'create_history_processor': '.factory',
    'pin': '.pinning',
    'pin_tool_errors': '.pinning',
    'validate_history': '.validate',
}
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
