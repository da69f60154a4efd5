"""What a request may hold: the context policy resolved into limits per model (windows from profiles, local
servers and names), the room a read-back or a newest request has, and the near-limit notice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._policy import ContextLimits, ContextPolicy, ContextPolicyError
    from .model_info import ContextWindowUnknownError, ModelInfo
    from .notice import NearLimitNotice

__all__ = (
    'ContextLimits',
    'ContextPolicy',
    'ContextPolicyError',
    'ContextWindowUnknownError',
    'ModelInfo',
    'NearLimitNotice',
)

_EXPORTS = {
    'ContextLimits': '._policy',
    'ContextPolicy': '._policy',
    'ContextPolicyError': '._policy',
    'ContextWindowUnknownError': '.model_info',
    'ModelInfo': '.model_info',
    'NearLimitNotice': '.notice',
}

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
