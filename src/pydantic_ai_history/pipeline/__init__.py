"""The capability every part of the package is (`HistoryCapability`; `StageCapability`, a stage that is one
too) and what a stage receives for one request (`HistoryContext`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ..context._context import CompactionRequest, HistoryContext, HistoryStage, ScopeKey, default_scope
    from ._capability import HistoryCapability
    from ._stage_capability import StageCapability
    from ._stats import HistoryStats, RunStats

__all__ = (
    'CompactionRequest',
    'HistoryCapability',
    'HistoryContext',
    'HistoryStage',
    'HistoryStats',
    'RunStats',
    'ScopeKey',
    'StageCapability',
    'default_scope',
)

_EXPORTS = {
    'CompactionRequest': '..context._context',
    'HistoryCapability': '._capability',
    'HistoryContext': '..context._context',
    'HistoryStage': '..context._context',
    'HistoryStats': '._stats',
    'RunStats': '._stats',
    'ScopeKey': '..context._context',
    'StageCapability': '._stage_capability',
    'default_scope': '..context._context',
}

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
