"""Keep PydanticAI agents inside their context window without breaking their conversations."""

from __future__ import annotations

from ._context import HistoryContext, HistoryStage
from .events import (
    ArtifactProcessed,
    CompactionResult,
    ContentLost,
    HistoryEvent,
    HistoryWarning,
    RequestProcessed,
    StageFailed,
    WindowApplied,
)
from .factory import create_history_processor
from .files import FileSettings
from .pinning import PinPredicate, pin, pin_tool_errors
from .processor import HistoryProcessor, HistoryStats, RunStats
from .stages.artifacts import (
    ArtifactDecision,
    ArtifactPlan,
    ArtifactPlanner,
    ArtifactSettings,
    ProcessingStrategy,
    browser_snapshot_reducer,
    console_output_reducer,
)
from .stages.compactor import CompactionSettings, Compactor
from .stages.window import SlidingWindow, WindowSettings
from .tokens import TokenCounter, TokenEstimate, TokenizerProfile
from .validate import HistoryValidationError, Violation, assert_valid_history, validate_history
from .model_info import ContextWindowUnknownError

__all__ = (
    'ArtifactDecision',
    'ArtifactPlan',
    'ArtifactPlanner',
    'ArtifactProcessed',
    'ArtifactSettings',
    'CompactionResult',
    'CompactionSettings',
    'Compactor',
    'ContentLost',
    'ContextWindowUnknownError',
    'FileSettings',
    'HistoryContext',
    'HistoryEvent',
    'HistoryProcessor',
    'HistoryStage',
    'HistoryStats',
    'HistoryValidationError',
    'HistoryWarning',
    'PinPredicate',
    'ProcessingStrategy',
    'RequestProcessed',
    'RunStats',
    'SlidingWindow',
    'StageFailed',
    'TokenCounter',
    'TokenEstimate',
    'TokenizerProfile',
    'Violation',
    'WindowApplied',
    'WindowSettings',
    'assert_valid_history',
    'browser_snapshot_reducer',
    'console_output_reducer',
    'create_history_processor',
    'pin',
    'pin_tool_errors',
    'validate_history',
)

__version__ = '0.1.0'
