"""Histories shaped the way pydantic-ai's own tests build them, on every supported pydantic-ai version.

Hand-built ones follow `tests/test_transcript_repair.py` (returns across an intervening response, a
deferred run resumed with a new prompt, duplicate results, reused ids, retries) and the message snapshots of
`test_hitl_tool_approval`, `test_parallel_tool_return_with_deferred` and
`test_resume_deferred_tool_with_invalid_output_call` (returns of one response split over two requests).
`agent_histories()` runs real agents through those flows and records every history the processor is given.

`VALID` names the shapes pydantic-ai's pre-send repair leaves unchanged; the others it would change.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import pydantic_ai.messages as _m
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pydantic_ai_history._compat import (
    COMPACTION_PART,
    COMPACTION_REQUEST_PART,
    FILE_PART,
    NATIVE_TOOL_CALL_PARTS,
    NATIVE_TOOL_RETURN_PARTS,
    RETRY_FEEDBACK_PART,
)

__all__ = ('VALID', 'agent_histories', 'handbuilt', 'pad', 'repair_changes', 'repair_functions')

_HAS_OUTCOME = 'outcome' in {f.name for f in dataclasses.fields(ToolReturnPart)}
FILLER = 'the service handled the request and wrote a log line with the latency and the region. '


def _part(name: str) -> Any:
    return getattr(_m, name, None)


def _retry(content: str, tool_name: str | None = None, tool_call_id: str | None = None) -> RetryPromptPart:
    kwargs: dict[str, Any] = {'content': content}
    if tool_name is not None:
        kwargs['tool_name'] = tool_name
    if tool_call_id is not None:
        kwargs['tool_call_id'] = tool_call_id
    with warnings.catch_warnings():  # deprecated on 2.x; stored histories still hold it
        warnings.simplefilter('ignore')
        return RetryPromptPart(**kwargs)


def _ret(name: str, call_id: str, content: Any = 'ok', outcome: str | None = None) -> ToolReturnPart:
    if outcome is not None and _HAS_OUTCOME:
        return ToolReturnPart(tool_name=name, content=content, tool_call_id=call_id, outcome=outcome)  # type: ignore[call-arg]
    return ToolReturnPart(tool_name=name, content=content, tool_call_id=call_id)


def _call(name: str, call_id: str, args: Any = None) -> ToolCallPart:
    return ToolCallPart(tool_name=name, args=args if args is not None else {}, tool_call_id=call_id)


def _req(*parts: Any) -> ModelRequest:
    return ModelRequest(parts=list(parts))


def _resp(*parts: Any, **kwargs: Any) -> ModelResponse:
    return ModelResponse(parts=list(parts), **kwargs)


def _user(text: str) -> ModelRequest:
    return _req(UserPromptPart(content=text))


def _hitl_resume() -> list[ModelMessage]:
    return [
        _user('Create new_file.py and delete ok_to_delete.py and never_delete.py'),
        _resp(
            _call('create_file', 'create_file', {'path': 'new_file.py', 'content': 'print("Hello, world!")'}),
            _call('delete_file', 'ok_to_delete', {'path': 'ok_to_delete.py'}),
            _call('delete_file', 'never_delete', {'path': 'never_delete.py'}),
        ),
        _req(
            _ret(
                'create_file',
                'create_file',
                'File \'new_file.py\' created with content: print("Hello, world!")',
            )
        ),
        _req(
            _ret('delete_file', 'ok_to_delete', "File 'ok_to_delete.py' deleted"),
            _ret('delete_file', 'never_delete', 'File cannot be deleted', outcome='denied'),
        ),
    ]


def _parallel_deferred_resume() -> list[ModelMessage]:
    prices = ['apple', 'banana', 'pear', 'grape']
    return [
        _user('What do an apple, a banana, a pear and a grape cost? Also buy me a pear.'),
        _resp(
            *(_call('get_price', f'get_price_{f}', {'fruit': f}) for f in prices),
            *(_call('buy', f'buy_{f}', {'fruit': f}) for f in ['apple', 'banana', 'pear']),
        ),
        _req(
            _ret('get_price', 'get_price_apple', 10.0),
            _retry('Unknown fruit: banana', 'get_price', 'get_price_banana'),
            _ret('get_price', 'get_price_pear', 10.0),
            _retry('Unknown fruit: grape', 'get_price', 'get_price_grape'),
            UserPromptPart(content='The price of apple is 10.0.'),
            UserPromptPart(content='The price of pear is 10.0.'),
        ),
        _req(
            _retry('Apples are not available', 'buy', 'buy_apple'),
            _ret('buy', 'buy_banana', True),
            UserPromptPart(content='I bought a banana'),
            _retry('The purchase of pears was denied.', 'buy', 'buy_pear'),
        ),
    ]


def _invalid_output_call_resume() -> list[ModelMessage]:
    """`test_resume_deferred_tool_with_invalid_output_call`: an output tool call beside a deferred one."""
    return [
        _user('Hello'),
        _resp(_call('final_result', 'output', {'bad': 'args'}), _call('deferred_tool', 'deferred')),
        _req(_retry('output did not validate', 'final_result', 'output')),
        _req(_ret('deferred_tool', 'deferred', 'approved result')),
    ]


def _continued(messages: list[ModelMessage]) -> list[ModelMessage]:
    return [*messages, _resp(TextPart(content='Done!')), _user('And now?')]


def _signed_thinking() -> list[ModelMessage]:
    return [
        _req(SystemPromptPart(content='You are careful.'), UserPromptPart(content='Check both files.')),
        _resp(
            ThinkingPart(content='I should read both files.', signature='sig-1'),
            TextPart(content='Reading them.'),
            _call('read', 'r1', {'path': 'a.py'}),
            _call('read', 'r2', {'path': 'b.py'}),
        ),
        _req(_ret('read', 'r1', 'print(1)')),
        _req(_ret('read', 'r2', 'print(2)')),
        _resp(ThinkingPart(content='Both are fine.', signature='sig-2')),
        _resp(TextPart(content='Both files print a number.')),
        _user('Thanks.'),
    ]


def _native_tools() -> list[ModelMessage]:
    native_call, native_return = NATIVE_TOOL_CALL_PARTS[0], NATIVE_TOOL_RETURN_PARTS[0]
    return [
        _user('Search and compute.'),
        _resp(
            _call('real_tool', 'real_1', {'a': 1}),
            native_call(
                tool_name='code_execution',
                args={'code': 'x'},
                tool_call_id='srv_1',
                provider_name='anthropic',
            ),
            native_return(
                tool_name='code_execution', content='y', tool_call_id='srv_1', provider_name='anthropic'
            ),
        ),
        _req(_ret('real_tool', 'real_1', 'real result')),
        _resp(TextPart(content='OK.')),
        _user('Explain?'),
    ]


def _every_part_type() -> list[ModelMessage]:
    """Every part type this pydantic-ai version has, where it may stand, in a valid history."""
    first: list[Any] = [SystemPromptPart(content='sys'), UserPromptPart(content=['Look.', 'Then answer.'])]
    response: list[Any] = [ThinkingPart(content='plan'), TextPart(content='Working.')]
    answers: list[Any] = []
    follow: list[Any] = [UserPromptPart(content='next')]
    if FILE_PART is not None:
        response.append(FILE_PART(content=BinaryContent(data=b'\x89PNG', media_type='image/png')))
    if COMPACTION_PART is not None and COMPACTION_REQUEST_PART is None:
        response.append(COMPACTION_PART(content='provider compaction'))
    if COMPACTION_REQUEST_PART is not None:
        follow.insert(0, COMPACTION_REQUEST_PART(content='an earlier summary'))
    if RETRY_FEEDBACK_PART is not None:
        follow.append(
            RETRY_FEEDBACK_PART(
                content='output did not validate', retry=_m.RetryInfo(cause='validation_error')
            )
        )  # type: ignore[attr-defined]
    else:
        follow.append(_retry('output did not validate, try again'))
    calls: list[Any] = [_call('lookup', 'l1')]
    answers.append(_ret('lookup', 'l1', {'rows': [1, 2, 3]}))
    for call_name, return_name, call_id in (
        ('ToolSearchCallPart', 'ToolSearchReturnPart', 'ts1'),
        ('LoadCapabilityCallPart', 'LoadCapabilityReturnPart', 'lc1'),
    ):
        call_cls, return_cls = _part(call_name), _part(return_name)
        if call_cls is None or return_cls is None:
            continue
        search = call_name.startswith('ToolSearch')
        args = {'queries': ['x']} if search else {'id': 'search'}
        content = {'discovered_tools': []} if search else {'message': 'loaded'}
        try:
            call = call_cls(tool_call_id=call_id, args=args)
            answer = return_cls(tool_call_id=call_id, content=content)
        except Exception:  # a signature this version spells differently: the part is optional here
            continue
        calls.append(call)
        answers.append(answer)
    for name, kwargs in (
        ('ToolAvailabilityDeltaPart', {'tools_added': ['lookup'], 'tool_call_id': 'l1'}),
        ('CapabilityLoadDeltaPart', {'loaded': ['search']}),
        ('InstructionDeltaPart', {'id': 'i1', 'content': 'be brief'}),
    ):
        cls = _part(name)
        if cls is not None:
            with contextlib.suppress(Exception):  # a signature this version spells differently
                answers.append(cls(**kwargs))
    return [
        _req(*first),
        _resp(*response, *calls),
        _req(*answers),
        _resp(TextPart(content='Done.')),
        _req(*follow),
    ]


def _deferred_frontier() -> list[ModelMessage]:
    """`test_deferred_run_history_not_silently_repaired`: an approval still pending, then a new prompt."""
    return [
        _user('Do it.'),
        _resp(_call('get_data', 'call_data'), _call('create_file', 'call_file', {'path': 'x'})),
        _req(_ret('get_data', 'call_data', 'data')),
        _user('Never mind.'),
    ]


def _long(messages: list[ModelMessage], rounds: int = 6) -> list[ModelMessage]:
    """`messages` after `rounds` earlier tool rounds with sizeable outputs, so budgets can cut."""
    opening, rest = messages[0], messages[1:]
    earlier: list[ModelMessage] = []
    for i in range(rounds):
        earlier.append(_resp(TextPart(content=f'Step {i}.'), _call('fetch', f'early_{i}', {'n': i})))
        earlier.append(_req(_ret('fetch', f'early_{i}', pad(i, 60 + 40 * i))))
        if i % 2:
            earlier.append(_resp(TextPart(content=pad(i, 30))))
            earlier.append(_user(f'Continue with step {i + 1}.'))
    return [opening, *earlier, *rest]


def pad(seed: int, words: int) -> str:
    return f'[{seed}] ' + ' '.join(FILLER.split()[(seed + k) % 14] for k in range(words))


def handbuilt() -> dict[str, list[ModelMessage]]:
    """Every shape, each as a processor input (ending with the current request)."""
    shapes: dict[str, Callable[[], list[ModelMessage]]] = {
        'hitl_resume': _hitl_resume,
        'hitl_resume_continued': lambda: _continued(_hitl_resume()),
        'parallel_deferred_resume': _parallel_deferred_resume,
        'parallel_deferred_continued': lambda: _continued(_parallel_deferred_resume()),
        'invalid_output_call_resume': _invalid_output_call_resume,
        'signed_thinking_next_to_calls': _signed_thinking,
        'native_tools': _native_tools,
        'every_part_type': _every_part_type,
        'deferred_frontier': _deferred_frontier,
        'across_intervening_response': lambda: [
            _user('What is the weather?'),
            _resp(_call('get_weather', 'call_1', {'city': 'Mexico City'}), provider_response_id='resp_1'),
            _resp(TextPart(content='I could not check the weather.'), provider_response_id='resp_2'),
            _req(_ret('get_weather', 'call_1', 'Sunny')),
            _user('Thanks.'),
        ],
        'duplicate_result': lambda: [
            _user('What is the weather?'),
            _resp(_call('get_weather', 'call_1')),
            _req(_ret('get_weather', 'call_1', 'Sunny'), _ret('get_weather', 'call_1', 'Sunny again')),
            _resp(TextPart(content='Sunny!')),
            _user('Thanks.'),
        ],
        'retry_prompt_answers_call': lambda: [
            _user('What is the weather?'),
            _resp(_call('get_weather', 'call_1', {'city': 'Atlantis'})),
            _req(_retry('Unknown city, try again.', 'get_weather', 'call_1')),
            _resp(TextPart(content='I could not find that city.')),
            _user('Thanks.'),
        ],
        'reused_id_answered_twice': lambda: [
            _user('Weather twice?'),
            _resp(_call('get_weather', 'call_1', {'city': 'Mexico City'})),
            _req(_ret('get_weather', 'call_1', 'Sunny')),
            _resp(_call('get_weather', 'call_1', {'city': 'Amsterdam'})),
            _req(_ret('get_weather', 'call_1', 'Rainy')),
            _resp(TextPart(content='Sunny, then rainy.')),
            _user('Thanks.'),
        ],
        # what pydantic-ai's repair changes
        'dangling_mid_history': lambda: [
            _user('What is the weather?'),
            _resp(_call('get_weather', 'call_1')),
            _user('Never mind, tell me a joke.'),
            _resp(TextPart(content='Here is a joke.')),
            _user('Explain?'),
        ],
        'result_before_call': lambda: [
            _user('What is the weather?'),
            _req(_ret('get_weather', 'call_1', 'Sunny')),
            _resp(_call('get_weather', 'call_1')),
            _user('And tomorrow?'),
            _resp(TextPart(content='No idea.')),
            _user('Thanks.'),
        ],
        'orphaned_result': lambda: [
            _req(UserPromptPart(content='What is the weather?'), _ret('get_weather', 'ghost', 'Sunny')),
            _resp(TextPart(content='Sunny.')),
            _user('Thanks.'),
        ],
        'plain_retry_does_not_answer': lambda: [
            _user('What is the weather?'),
            _resp(_call('get_weather', 'call_1')),
            _req(_retry('Response was not valid, try again.', tool_call_id='call_1')),
            _resp(TextPart(content='Let me try again.')),
            _user('Thanks.'),
        ],
        'shadowed_open_call': lambda: [
            _user('What is the weather?'),
            _resp(_call('get_weather', 'call_1', {'city': 'Mexico City'})),
            _user('In Amsterdam, I mean.'),
            _resp(_call('get_weather', 'call_1', {'city': 'Amsterdam'})),
            _req(_ret('get_weather', 'call_1', 'Rainy')),
            _resp(TextPart(content='Rainy!')),
            _user('Thanks.'),
        ],
        'dangling_followed_by_response': lambda: [
            _user('What is the weather?'),
            _resp(_call('get_weather', 'call_1'), provider_response_id='resp_1'),
            _resp(TextPart(content='I could not check the weather.'), provider_response_id='resp_2'),
            _user('Try again?'),
        ],
    }
    out = {name: build() for name, build in shapes.items()}
    for name in sorted(VALID):
        if name in out:
            out[f'{name}_long'] = _long(out[name])
    return out


VALID = frozenset(
    {
        'hitl_resume',
        'hitl_resume_continued',
        'parallel_deferred_resume',
        'parallel_deferred_continued',
        'invalid_output_call_resume',
        'signed_thinking_next_to_calls',
        'native_tools',
        'every_part_type',
        'deferred_frontier',
        'across_intervening_response',
        'duplicate_result',
        'retry_prompt_answers_call',
        'reused_id_answered_twice',
    }
)


def repair_functions() -> tuple[Any, Any] | None:
    """pydantic-ai's pre-send repair passes (`_drop_orphaned_tool_results`, `_repair_dangling_tool_calls`),
    or None on versions without them."""
    drop = getattr(_m, '_drop_orphaned_tool_results', None)
    repair = getattr(_m, '_repair_dangling_tool_calls', None)
    if drop is None or repair is None:
        return None
    return drop, repair


def repair_changes(messages: list[ModelMessage], *, repair_last_response: bool = False) -> bool:
    """Whether pydantic-ai's pre-send repair would change `messages` (False where it has none)."""
    functions = repair_functions()
    if functions is None:
        return False
    drop, repair = functions
    once = drop(list(messages))
    once = repair(once, repair_last_response=repair_last_response)
    return len(once) != len(messages) or any(a is not b for a, b in zip(once, messages, strict=True))


# ---- real agents -----------------------------------------------------------------------------------------


def agent_histories() -> dict[str, list[ModelMessage]]:
    """Every history a processor is given in real approval and deferred-tool runs (empty where the version
    lacks deferred tools)."""
    try:
        from pydantic_ai import (
            CallDeferred,
            DeferredToolRequests,
            DeferredToolResults,
            ModelRetry,
            ToolDenied,
        )
    except ImportError:
        return {}
    from pydantic_ai import Agent
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from pydantic_ai_history._compat import HAS_CAPABILITIES, ProcessHistory

    seen: dict[str, list[ModelMessage]] = {}
    label = ['']

    def record(messages: list[ModelMessage]) -> list[ModelMessage]:
        seen[f'{label[0]}_{len(seen)}'] = list(messages)
        return messages

    def hitl(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return _resp(
                _call('create_file', 'create_file', {'path': 'new_file.py', 'content': pad(1, 80)}),
                _call('delete_file', 'ok_to_delete', {'path': 'ok_to_delete.py'}),
                _call('delete_file', 'never_delete', {'path': 'never_delete.py'}),
            )
        return _resp(TextPart(content='Done! ' + pad(2, 20)))

    kwargs: dict[str, Any] = (
        {'capabilities': [ProcessHistory(record)]} if HAS_CAPABILITIES else {'history_processors': [record]}
    )
    agent = Agent(FunctionModel(hitl), output_type=[str, DeferredToolRequests], **kwargs)  # type: ignore[call-overload]

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        return f'File {path!r} deleted'

    @agent.tool_plain
    def create_file(path: str, content: str) -> str:
        return f'File {path!r} created with content: {content}'

    label[0] = 'agent_hitl'
    first = agent.run_sync('Create new_file.py and delete ok_to_delete.py and never_delete.py')
    agent.run_sync(
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(
            approvals={'ok_to_delete': True, 'never_delete': ToolDenied('File cannot be deleted')}
        ),
    )

    def prices(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return _resp(
                *(_call('get_price', f'get_price_{f}', {'fruit': f}) for f in ['apple', 'banana', 'pear']),
                *(_call('buy', f'buy_{f}', {'fruit': f}) for f in ['apple', 'banana']),
            )
        return _resp(TextPart(content='Done!'))

    agent2 = Agent(FunctionModel(prices), output_type=[str, DeferredToolRequests], **kwargs)  # type: ignore[call-overload]

    @agent2.tool_plain
    def get_price(fruit: str) -> float:
        if fruit == 'banana':
            raise ModelRetry(f'Unknown fruit: {fruit}')
        return 10.0

    @agent2.tool_plain
    def buy(fruit: str) -> bool:
        raise CallDeferred

    label[0] = 'agent_deferred'
    first = agent2.run_sync('What do fruits cost? Buy an apple and a banana.')
    agent2.run_sync(
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(
            calls={'buy_apple': ModelRetry('No apples'), 'buy_banana': True}
        ),
    )
    return seen
