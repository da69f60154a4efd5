"""The history as pydantic-ai holds it: units (a response with the returns it asked for), validation against
the invariants every provider enforces, pinning, and the marks the package puts on what it writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .pinning import PinPredicate, pin, pin_tool_errors
    from .units import Unit, split_units
    from .validate import HistoryValidationError, Violation, assert_valid_history, validate_history

__all__ = (
    'HistoryValidationError',
    'PinPredicate',
    'Unit',
    'Violation',
    'assert_valid_history',
    'pin',
    'pin_tool_errors',
    'split_units',
    'validate_history',
)

_EXPORTS = {
    'HistoryValidationError': '.validate',
    'PinPredicate': '.pinning',
    'Unit': '.units',
    'Violation': '.validate',
    'assert_valid_history': '.validate',
    'pin': '.pinning',
    'pin_tool_errors': '.pinning',
    'split_units': '.units',
    'validate_history': '.validate',
}

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
