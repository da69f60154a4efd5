"""The coding loop (issue 37): a second workload, of a different shape from the tool loop of `cost.workload`.

240 tool calls: 146 `read_file` calls of real source files of 2-6K o200k tokens (49 of them re-reads of a file
read before) and 94 real agent tool outputs, interleaved in a seeded order. Real material only:

- the source files are the installed `pydantic_ai` package's own modules of 2,000-6,000 o200k tokens, by
  relative path (deterministic for one pydantic-ai-slim version: the cost venv pins 2.62.0, which has 106 of
  them); 97 distinct files are read, each re-read picks one of the 8 files read most recently (an agent
  re-reads what it is working on);
- the agent outputs are the `ToolReturnPart`s of the SWE-agent and SWE-Gym (OpenHands) conversations in
  `../shared/fixtures/conversations` (MIT; 100 outputs of `bash`, `open`, `edit`, `execute_bash`,
  `str_replace_editor`, ...): the 94 largest, in conversation order, each called with its original tool name
  and arguments.

The 30 facts are planted as in the tool loop (the same makers: an order id, an amount, a path, each absent
from all the material, tool arguments included) in 30 calls spread evenly over the run, at a line boundary in
the middle (25-75%) of the output: in a source file as a comment line (`# Audit note: the order id recorded
for this module is ...`), in an agent output as a line. A fact planted in a file stays in that file: every
later read of it returns the fact too (the file changed on disk), so deduplicating re-reads never loses one.

Other step counts (`--steps 40`) keep the proportions: reads = round(steps x 146 / 240), re-reads =
round(reads x 49 / 146), the agent outputs evenly spaced among the 94.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

from .workload import _FACT_MAKERS, _LABELS, FACTS, Fact, ToolSpec, ToolStep, Workload, fact_steps

__all__ = ('SEED', 'STEPS', 'agent_outputs', 'build_coding_workload', 'source_files')

SEED = 37_240
STEPS = 240
READS = 146
REREADS = 49
OUTPUTS = 94
RECENT = 8
"""A re-read picks one of the files read most recently."""
MIN_TOKENS, MAX_TOKENS = 2_000, 6_000
CONVERSATIONS = Path(__file__).resolve().parents[3] / 'shared' / 'fixtures' / 'conversations'
SWE_PREFIXES = ('swe_agent_', 'swe_gym_')

INSTRUCTIONS = (
    'You are a coding agent working in the pydantic-ai repository. Read the source files you need with '
    'read_file, and use the shell and editor tools to reproduce the bug, fix it and test the fix. Note every '
    'audit note you meet (identifiers, amounts and file paths) and keep them exact: the final report must '
    'quote them verbatim.'
)
PROMPT = (
    'Tool-call retries lose their arguments after a validation error. Find the cause in pydantic_ai, fix '
    'it, run the reproduction, and at the end list every audit note (order ids, disputed amounts, export '
    'paths) with the file or command it came from.'
)
_DESCRIPTIONS = {
    'read_file': 'Read a source file of the repository and return its text.',
    'bash': 'Run a bash command in the repository and return its output.',
    'execute_bash': 'Execute a bash command in the terminal and return its output.',
    'open': 'Open a file in the editor window, optionally at a line number.',
    'edit': 'Replace text in the open file.',
    'create': 'Create a new file and open it.',
    'insert': 'Insert text in the open file.',
    'find_file': 'Find files by name in a directory.',
    'submit': 'Submit the current changes as the solution.',
    'str_replace_editor': 'View, create and edit files: view, create, str_replace, insert, undo_edit.',
}
_TYPES = {str: 'string', int: 'integer', float: 'number', bool: 'boolean', list: 'array', dict: 'object'}


@cache
def source_files(lo: int = MIN_TOKENS, hi: int = MAX_TOKENS) -> tuple[tuple[str, str], ...]:
    """The installed `pydantic_ai` package's modules of `lo`-`hi` o200k tokens: (relative path, text)."""
    import pydantic_ai
    import tiktoken

    encoding = tiktoken.get_encoding('o200k_base')
    root = Path(pydantic_ai.__file__).resolve().parent
    out = []
    for path in sorted(root.rglob('*.py')):
        text = path.read_text(encoding='utf-8')
        if lo <= len(encoding.encode_ordinary(text)) <= hi:
            out.append((path.relative_to(root.parent).as_posix(), text))
    return tuple(out)


@cache
def agent_outputs(count: int = OUTPUTS) -> tuple[tuple[str, dict[str, Any], str], ...]:
    """The `count` largest tool outputs (in characters) of the SWE conversations, in conversation order:
    (tool name, the call's arguments, the output as the provider receives it)."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter, ToolCallPart, ToolReturnPart

    found: list[tuple[str, dict[str, Any], str]] = []
    for path in sorted(CONVERSATIONS.glob('*.json')):
        if not path.name.startswith(SWE_PREFIXES):
            continue
        calls: dict[str, ToolCallPart] = {}
        for message in ModelMessagesTypeAdapter.validate_json(path.read_bytes()):
            for part in message.parts:
                if isinstance(part, ToolCallPart):
                    calls[part.tool_call_id] = part  # ids are reused: the newest call before the return
                elif isinstance(part, ToolReturnPart):
                    call = calls.get(part.tool_call_id)
                    args = call.args_as_dict() if call is not None else {}
                    found.append((part.tool_name, args, part.model_response_str()))
    keep = sorted(range(len(found)), key=lambda i: (-len(found[i][2]), i))[:count]
    return tuple(found[i] for i in sorted(keep))


def _tool_specs(outputs: list[tuple[str, dict[str, Any], str]]) -> tuple[ToolSpec, ...]:
    properties: dict[str, dict[str, dict[str, str]]] = {'read_file': {'path': {'type': 'string'}}}
    for name, args, _ in outputs:
        fields = properties.setdefault(name, {})
        for key, value in args.items():
            fields.setdefault(key, {'type': _TYPES.get(type(value), 'string')})
    specs = []
    for name, fields in properties.items():
        schema = {
            'type': 'object',
            'properties': {**fields, 'step': {'type': 'integer'}},
            'required': ['step'],
            'additionalProperties': False,
        }
        specs.append(ToolSpec(name, _DESCRIPTIONS.get(name, f'The `{name}` tool.'), schema))
    return tuple(specs)


def _with_line(text: str, line: str, rng: random.Random) -> tuple[str, int]:
    """`text` with `line` inserted at a line boundary 25-75% of the way through; the line index used."""
    lines = text.split('\n')
    at = max(1, int(len(lines) * rng.uniform(0.25, 0.75)))
    return '\n'.join([*lines[:at], line, *lines[at:]]), at


def build_coding_workload(
    steps: int, encode: Callable[[str], int], seed: int = SEED, facts: int = FACTS
) -> Workload:
    """The coding loop of `steps` calls (240 for issue 37's) and its facts; the same for every contender."""
    rng = random.Random(seed)
    reads = round(steps * READS / STEPS)
    rereads = min(round(reads * REREADS / READS), max(reads - 1, 0))
    count = steps - reads
    pool = list(agent_outputs())
    outputs = [pool[int(k * len(pool) / count)] for k in range(count)] if count else []
    files = source_files()
    texts = dict(files)
    kinds = ['read'] * reads + ['output'] * count
    rng.shuffle(kinds)
    again = set(rng.sample(range(1, reads), rereads)) if reads > 1 else set()
    fresh = rng.sample(range(len(files)), reads - len(again))
    corpus = '\n'.join([*(text for _, text in files), *(repr(a) + o for _, a, o in outputs)])

    carriers = {step: number for number, step in enumerate(fact_steps(steps, facts))}
    planted_in: dict[str, list[tuple[int, str]]] = {}  # path -> the fact lines planted in it so far
    order: list[str] = []  # distinct files in the order first read
    out: list[ToolStep] = []
    planted: list[Fact] = []
    read_no = output_no = 0
    for index, kind in enumerate(kinds):
        fact = _fact(rng, corpus, index, carriers[index]) if index in carriers else None
        if kind == 'read':
            if read_no in again:
                path = rng.choice(order[-RECENT:])
            else:
                path = files[fresh.pop(0)][0]
                order.append(path)
            read_no += 1
            text = texts[path]
            if fact is not None:  # the file changes on disk: this read and every later one hold the fact
                line = f'# Audit note: the {_LABELS[fact.kind]} recorded for this module is {fact.text}.'
                at = int(len(text.split('\n')) * rng.uniform(0.25, 0.75))
                planted_in.setdefault(path, []).append((max(1, at), line))
            lines = text.split('\n')
            for at, line in sorted(planted_in.get(path, []), reverse=True):
                lines.insert(at, line)
            output, tool, args = '\n'.join(lines), 'read_file', {'path': path}
        else:
            tool, args, output = outputs[output_no]
            output_no += 1
            if fact is not None:
                line = f'Audit note: the {_LABELS[fact.kind]} recorded for this step is {fact.text}.'
                output, _ = _with_line(output, line, rng)
        out.append(ToolStep(index, tool, f'{tool} {index}', output, encode(output), fact, args))
        if fact is not None:
            planted.append(fact)
    return Workload(
        tuple(out),
        tuple(planted),
        seed,
        name='coding',
        instructions=INSTRUCTIONS,
        prompt=PROMPT,
        tools=_tool_specs(outputs),
        source=(
            f'{len(files)} modules of pydantic-ai-slim {version("pydantic-ai-slim")} of '
            f'{MIN_TOKENS:,}-{MAX_TOKENS:,} tokens, {len(outputs)} SWE-agent / SWE-Gym outputs'
        ),
    )


def _fact(rng: random.Random, corpus: str, step: int, number: int) -> Fact:
    kind = ('id', 'amount', 'path')[number % 3]
    while True:
        text = _FACT_MAKERS[kind](rng)
        if text not in corpus:
            return Fact(step, text, kind)
