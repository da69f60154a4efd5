"""The context policy resolved per model, once: what every stage plans against, with what local servers said
their window is, and one announcement of what the limits had to assume or change."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..budget._policy import ContextLimits, ContextPolicy
from ..budget.model_info import is_test_model, model_info, model_name_of, profile_window, serving_candidates
from ..context._summarizer_settings import ModelRef
from ..events import HistoryEvent, HistoryWarning, WarningKind

if TYPE_CHECKING:
    from ..budget._local_server import LocalServer

logger = logging.getLogger('pydantic_ai_history')


@dataclass(eq=False)
class ModelLimits:
    """The limits of each model a capability serves, resolved once per model and announced once."""

    policy: ContextPolicy
    """The capability's policy."""
    emit: Callable[[HistoryEvent], None]
    """Where the announcements go (the capability's events)."""
    _limits: dict[tuple[tuple[str | None, int | None], ...], ContextLimits] = field(default_factory=dict)
    """The limits resolved, by the name and profile window of the model and of each it may move to: as many
    as the combinations of models the app serves (a new `Model` object of a known name adds none)."""
    _server_windows: dict[str, int] = field(default_factory=dict)
    """What local servers said their window is, by `LocalServer.key`."""
    _servers_asked: set[str] = field(default_factory=set)
    """The servers this capability asked (or took the process's answer from), by `LocalServer.key`."""
    _fallbacks_announced: set[str | None] = field(default_factory=set)
    """The models whose fallback window was announced: a window learnt later is announced as replacing it."""
    _last: tuple[ModelRef | None, tuple[ModelRef, ...], ContextLimits] | None = None
    """The models last asked for (by identity) and their resolved limits: most requests ask for the same."""
    _serverless: tuple[ModelRef, tuple[ModelRef, ...]] | None = None
    """The models last found served by no local server (by identity, with those an attempt may move to): the
    next request asks them nothing."""

    def limits_for(self, model: ModelRef | None, also: tuple[ModelRef, ...] = ()) -> ContextLimits:
        """See `HistoryCapability.limits_for`; `also`: the models an attempt may move to (a
        `ModelFallback`'s), planned for as a `FallbackModel`'s candidates are."""
        last = self._last
        if last is not None and last[0] is model and last[1] == also:  # the previous request's: they stand
            return last[2]
        key = tuple(map(_identity, (model, *also)))
        limits = self._limits.get(key)
        if limits is not None:
            self._last = (model, also, limits)
        else:
            info = model_info(model, also=also, server_windows=self._server_windows)
            limits = self.policy.resolve(info)
            if limits.window_source == 'fallback' and next(self._due(local_servers(model, *also)), None):
                return limits  # provisional: the first request asks the models' servers
            self._limits[key] = limits
            self._last = (model, also, limits)
            self._announce(limits, model)
        return limits

    def servers_to_ask(
        self, model: Any, also: tuple[ModelRef, ...] = (), *, again: bool
    ) -> list[tuple[Any, LocalServer]]:
        """Each model that may serve a request (`model`, and `also` the models an attempt may move to) with
        the local server to ask for its window: only where the policy does not set the window, once per server
        unless `again`, or again when the server has not said its window and its backoff has passed (see
        `probe_due`); each counts as asked."""
        serverless = self._serverless
        unasked = (
            model is None
            or isinstance(model, str)
            or (serverless is not None and serverless[0] is model and serverless[1] == also)
        )
        if self.policy.context_window is not None or unasked:
            return []
        servers = list(local_servers(model, *also))
        if not servers:
            self._serverless = (model, also)
        found = []
        for candidate, server in self._due(servers, again=again):  # lazy: a server once per call
            self._servers_asked.add(server.key)
            found.append((candidate, server))
        return found

    def _due(
        self, servers: Iterable[tuple[Any, LocalServer]], *, again: bool = False
    ) -> Iterator[tuple[Any, LocalServer]]:
        return ((c, server) for c, server in servers if again or self._to_ask(server))

    def _to_ask(self, server: LocalServer) -> bool:
        """Never asked by this capability, or asked without an answer and due again."""
        if server.key not in self._servers_asked:
            return True
        from ..budget._local_server import probe_due

        return server.key not in self._server_windows and probe_due(server)

    def learn_window(self, server: LocalServer, window: int | None) -> None:
        """What a server answered: its window, which every model's limits are resolved again with."""
        if window is not None:
            logger.info('%s serves %r with a %s-token window', server.base_url, server.model_name, window)
            self._server_windows[server.key] = window
            self._limits.clear()
            self._last = None

    def _announce(self, limits: ContextLimits, model: ModelRef | None) -> None:
        """Say once per model what the limits had to assume or change."""
        for adjustment in limits.adjustments:
            self.warn('setting_clamped', adjustment, {'model': limits.model_name})
        if limits.window_source != 'fallback':
            if limits.model_name in self._fallbacks_announced:
                self._fallbacks_announced.discard(limits.model_name)
                self._announce_learnt(limits)
            return
        self._fallbacks_announced.add(limits.model_name)
        silent = self._silent_servers(model)
        message = (
            f'the context window of {limits.model_name!r} is unknown: assuming '
            f'{limits.model_window:,} tokens. Set ContextPolicy(context_window=...) (or the model '
            "profile's context_window), or ContextPolicy(strict=True) to make this an error."
        )
        message = ' '.join([message, *silent.values()])
        # pydantic-ai's test models have no window on purpose: an app's tests should not see a warning
        details = {'model': limits.model_name, 'assumed_context_window': limits.model_window}
        if silent:
            details['local_server'] = ', '.join(silent)
        level = logging.INFO if is_test_model(model) else logging.WARNING
        self.warn('context_window_fallback', message, details, level)

    @staticmethod
    def _silent_servers(model: ModelRef | None) -> dict[str, str]:
        """What to set, by server kind, for each local server serving `model` that never says its window."""
        from ..budget._local_server import silent_server_advice

        found: dict[str, str] = {}
        for _, server in local_servers(model):
            advice = silent_server_advice(server)
            if advice is not None:
                found.setdefault(*advice)
        return found

    def _announce_learnt(self, limits: ContextLimits) -> None:
        """Say that a window learnt after the fallback was announced replaces it (a local server that was down
        or silent at the first request answered a later one)."""
        message = (
            f'the context window of {limits.model_name!r} is now known ({limits.window_source}): '
            f'{limits.model_window:,} tokens, replacing the assumed '
            f'{self.policy.fallback_context_window:,}.'
        )
        details = {
            'model': limits.model_name,
            'context_window': limits.model_window,
            'window_source': limits.window_source,
            'assumed_context_window': self.policy.fallback_context_window,
        }
        self.warn('context_window_learned', message, details)

    def warn(
        self, code: WarningKind, message: str, details: dict[str, Any], level: int = logging.WARNING
    ) -> None:
        logger.log(level, '%s: %s', code, message)
        self.emit(HistoryWarning(code=code, message=message, details=details))


def _identity(model: ModelRef | None) -> tuple[str | None, int | None]:
    """What a model's limits depend on: its name and, for a `Model`, its profile's window (a profile-less
    `Model` and its name resolve alike; two `Model`s of one name may carry two windows)."""
    return model_name_of(model), None if model is None or isinstance(model, str) else profile_window(model)


def local_servers(*models: object) -> Iterator[tuple[Any, LocalServer]]:
    """Each model that may serve a request to one of `models` and is served by a local server, with that
    server."""
    from ..budget._local_server import local_server_of  # loaded by the first `Model` asked about

    for model in models:
        for candidate in serving_candidates(model):
            server = local_server_of(candidate)
            if server is not None:
                yield candidate, server
