"""Keep PydanticAI agents inside their context window without breaking their conversations."""

from __future__ import annotations

from .events import (
    ArtifactProcessed,
    CompactionResult,
    HistoryEvent,
    HistoryWarning,
    RequestProcessed,
    StageFailed,
    WindowApplied,
)
from .factory import create_history_processor
from .pinning import pin, pin_tool_errors
from .processor import HistoryProcessor, HistoryStats, RunStats
from .stages.window import SlidingWindow, WindowSettings
from .tokens import TokenCounter, TokenEstimate, TokenizerProfile
from .validate import HistoryValidationError, Violation, assert_valid_history, validate_history
from .windows import ContextWindowUnknownError

__all__ = (
    'ArtifactProcessed',
    'CompactionResult',
    'ContextWindowUnknownError',
    'HistoryEvent',
    'HistoryProcessor',
    'HistoryStats',
    'HistoryValidationError',
    'HistoryWarning',
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
    'create_history_processor',
    'pin',
    'pin_tool_errors',
    'validate_history',
)

__version__ = '0.1.0'
