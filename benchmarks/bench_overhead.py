"""Issue 37, "invisible when it fits": what the processor costs while a history fits, beside harness's.

Every measure runs in a fresh interpreter (`--worker`), so one-time loads (the tokenizer, imports) land where
a real process pays them. Three sides: ours (this checkout's `src/`) in this interpreter; harness
(`pydantic_ai_harness.compaction.SummarizingCompaction`) in the venv of `bench_cost.py`, `.venvs/cost`
(pydantic-ai-harness 0.62.0, which pins pydantic-ai-slim 2.62.0, with this package installed beside it;
created with uv on first use, or `--harness-python PATH`, which must import both); and ours again in that
venv ("ours-beside"). The ratios to harness are judged on ours-beside: the two packages on one pydantic-ai.
pydantic-ai's own work between the hooks differs by version, and moves what the same hook code costs (on
2.68, which does more per step, our hook's median was 10% to 45% above its median on 2.62 from one run to the
next, by the same Python operations). `--no-harness` skips both of harness's venv's sides; a venv that
cannot be made is skipped with a note.

Measures (a `FunctionModel` stands in for the provider: its own time is in the baseline):
  - small run: an agent built and run (a tool call, its return, an answer), CPU per run (`process_time`)
    with the capability (built once, as an app builds its processor once) against without it, alternated,
    RUNS_SMALL rounds after a warm-up; the median of each, and their ratio. Target: ours <= 1.10x. Again on
    an agent with TOOLBOX more tools (never called): what the capability makes pydantic-ai do per tool.
  - idle request: an agent run on a loaded history of 300 or 20,000 messages (`_sizes.build`: real
    conversations, provider usage on every response), IDLE_STEPS tiny tool rounds; the capability's
    `before_model_request` timed on each request after the first WARM_REQUESTS (the process's warm-up),
    median. Target: <= 2x harness's.
  - first request: the same run's first `before_model_request` (fresh process: tokenizer load included).
    Target: <= +50 ms at 300 messages.
  - peak memory: that run's `ru_maxrss` against the same run without the capability.
  - retained per idle conversation: one capability, CONVERSATIONS runs (each its own conversation id, a
    300-message history of its own, one tool round); after they end and their histories are dropped, the
    traced memory (`tracemalloc`) still held, per conversation. Target: ours <= 100 KiB. Beside it the same
    runs without the capability (pydantic's string cache and the agents' schemas stay in any process).
  - import: CPU time of `from pydantic_ai_history import create_history_processor` (harness:
    `import pydantic_ai_harness.compaction`) in an interpreter that imported pydantic_ai (bytecode cached),
    median of RUNS_IMPORT. Target: ours <= 1.2x harness's.
  - the idle request again, alternated: `before_model_request`'s idle median at 300 messages in ALTERNATED
    processes per package, one of each in turn, so that what the machine does meanwhile falls on both sides
    alike (a single process's median moves by 30% between runs on a shared machine); the median of those
    medians, their range, and ours-beside over harness's. This is the figure the 2x target is judged by.
  - import + build + first run: in the same kind of interpreter (one agent run made without the package
    first), the CPU time of that import, building the capability and one small run with it, less the CPU of
    the same run without it: what a process pays before its first idle request is answered, wherever the
    package puts its loading (import, build or first request). Median of RUNS_IMPORT.

`--breakdown` measures instead where ours spends the small run's extra CPU: in one process, run by run in
turn, the run without a capability, with one that does nothing (pydantic-ai's own cost of any capability),
with ours, and with ours less one part at a time (that part made a pass-through: the request hook, the
read-back tool's prediction, the run hook, the tools), then all of them at once (the parts share what a run
meets first, its model and its new messages, which the first part to touch them pays for: alone they do not
add up); then two floors of any idle path: every request answered with only its input check and its event
(no context, no bound, no stage, no prediction), and that without the run hook, the stream event and the
tools; medians of `--runs` rounds.

The window is far beyond every history (100M tokens, budget 90M): nothing has to change, every figure is
overhead. Histories are written once to benchmarks/.data/overhead-N.json by this interpreter.

Run: python benchmarks/bench_overhead.py [--no-harness] [--harness-python PATH] [--ours-src PATH]
[--alternated N] [--quick] [--breakdown]
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / '.data'
SIZES = (300, 20_000)
IDLE_STEPS = 45
"""Tool rounds of the idle run (its requests stay within pydantic-ai's default limit of 50)."""
WARM_REQUESTS = 10
"""The requests of a fresh process that are its warm-up, not idle cost: CPython specializes a function's code
once it ran 8 times, and an idle hook of many small functions (ours) runs its first 7 or 8 requests 1.5x to 2x
slower (a hook of one loop over the history, harness's, specializes within its first request). The idle
measures are the requests after them; the first request has rows of its own."""
RUNS_SMALL = 200
TOOLBOX = 20
"""The small run again on an agent with this many more tools (`_toolbox`): what the capability costs
pydantic-ai per tool (with a per-attempt hook, pydantic-ai copies every tool's schema at every attempt)."""
WARM_UP = 5
"""Rounds of small runs before those measured."""
RUNS_IMPORT = 9
CONVERSATIONS = 20
ALTERNATED = 8
"""Processes per package in the alternated idle measure."""
WINDOW, BUDGET, TARGET = 100_000_000, 90_000_000, 1_000_000


# ---- the worker: one measure of one package, in its own interpreter -------------------------------------


def _capability(package: str) -> Any:
    from pydantic_ai.models.function import FunctionModel

    summarizer = FunctionModel(lambda messages, info: _answer('summary'), model_name='gpt-4o-mini')
    if package == 'harness':
        from pydantic_ai_harness.compaction import SummarizingCompaction

        return SummarizingCompaction(model=summarizer, max_tokens=BUDGET, keep_tokens=TARGET)
    from pydantic_ai_history import ContextPolicy, SummarizerSettings, create_history_processor

    return create_history_processor(
        summarizer=SummarizerSettings(model=summarizer),
        policy=ContextPolicy(context_window=WINDOW, max_tokens=BUDGET, target_tokens=TARGET),
    )


def _answer(text: str) -> Any:
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.usage import RequestUsage

    return ModelResponse(parts=[TextPart(text)], usage=RequestUsage(input_tokens=10, output_tokens=5))


def _model(tool_rounds: int, stamps: list[float] | None = None) -> Any:
    """A provider stand-in: `tool_rounds` calls of `lookup`, then an answer; `stamps` gets the time of each
    request it receives."""
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.usage import RequestUsage

    def respond(messages: list[Any], info: Any) -> Any:
        if stamps is not None:
            stamps.append(time.perf_counter())
        done = sum(1 for m in messages for p in m.parts if getattr(p, 'tool_call_id', '').startswith('idle_'))
        done //= 2  # each round: its call and its return
        if done >= tool_rounds:
            return _answer('That is all.')
        call = ToolCallPart('lookup', {'item': done}, tool_call_id=f'idle_{len(messages)}')
        return ModelResponse(parts=[call], usage=RequestUsage(input_tokens=10, output_tokens=5))

    return FunctionModel(respond, model_name='gpt-4o')


def _agent(
    capability: Any, tool_rounds: int = 1, stamps: list[float] | None = None, more_tools: int = 0
) -> Any:
    """The agent of every measure: `lookup`, and `more_tools` tools of six parameters each that the model
    never calls (an app's usual toolbox)."""
    from pydantic_ai import Agent

    model = _model(tool_rounds, stamps)
    toolsets = [_toolbox(more_tools)] if more_tools else []
    agent: Any = Agent(model, capabilities=[capability] if capability is not None else [], toolsets=toolsets)

    @agent.tool_plain
    def lookup(item: int) -> str:
        """Look an item up."""
        return f'item {item}: ok'

    return agent


@functools.cache
def _toolbox(tools: int) -> Any:
    """`tools` tools of six parameters each (a name, a mode of three, numbers, flags), built once."""
    from pydantic_ai.toolsets import FunctionToolset

    def search(
        query: str, mode: Literal['exact', 'fuzzy', 'regex'], limit: int, offset: int, recent: bool, path: str
    ) -> str:
        """Search the workspace.

        Args:
            query: What to look for.
            mode: How to match it.
            limit: At most this many results.
            offset: Skip this many first.
            recent: Only what changed lately.
            path: Under this folder.
        """
        return ''

    toolset: FunctionToolset[Any] = FunctionToolset()
    for i in range(tools):
        toolset.add_function(search, name=f'search_{i}')
    return toolset


def _history(size: int) -> list[Any]:
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    return list(ModelMessagesTypeAdapter.validate_json((DATA / f'overhead-{size}.json').read_bytes()))


def _timed(capability: Any, times: list[float]) -> Any:
    """The capability, its `before_model_request` timed into `times` (ms)."""
    cls = type(capability)
    original = cls.before_model_request

    async def timed(self: Any, ctx: Any, request_context: Any) -> Any:
        started = time.perf_counter()
        result = await original(self, ctx, request_context)
        times.append((time.perf_counter() - started) * 1000)
        return result

    capability.__class__ = type(f'Timed{cls.__name__}', (cls,), {'before_model_request': timed})
    return capability


Setup = tuple[Any, Any, Any]
"""A small run's setup: the capability (or None), and what makes it so before the run and undoes it after (or
None)."""


def _cpu_in_turn(setups: dict[str, Setup], runs: int, more_tools: int = 0) -> dict[str, float]:
    """The small run with each setup, one run of each in turn (the order reversed every round), `runs` rounds
    after WARM_UP: the median CPU ms of each."""
    cpu: dict[str, list[float]] = {key: [] for key in setups}
    for i in range(runs + WARM_UP):
        for key in list(setups) if i % 2 else list(reversed(setups)):
            capability, enter, leave = setups[key]
            if enter is not None:
                enter()
            started = time.process_time()
            _agent(capability, more_tools=more_tools).run_sync('What is item 1?')
            elapsed = (time.process_time() - started) * 1000
            if leave is not None:
                leave()
            if i >= WARM_UP:
                cpu[key].append(elapsed)
    return {key: statistics.median(values) for key, values in cpu.items()}


def small_run(package: str, runs: int, more_tools: int = 0) -> dict[str, Any]:
    setups: dict[str, Setup] = {'with': (_capability(package), None, None), 'without': (None, None, None)}
    found = _cpu_in_turn(setups, runs, more_tools)
    with_ms, without_ms = found['with'], found['without']
    return {'with_ms': with_ms, 'without_ms': without_ms, 'ratio': with_ms / without_ms}


def _parts(capability: Any) -> dict[str, tuple[Any, Any]]:
    """Each part of ours made a pass-through, and undone: (enter, leave) callables."""
    ours = type(capability)

    async def request(self: Any, ctx: Any, request_context: Any) -> Any:
        return request_context

    async def run(self: Any, ctx: Any, *, handler: Any) -> Any:
        return await handler()

    def swap(**methods: Any) -> tuple[Any, Any]:
        variant = type('Parts', (ours,), methods)  # once: pydantic-ai reads some things once per class

        def enter() -> None:
            capability.__class__ = variant

        def leave() -> None:
            capability.__class__ = ours

        return enter, leave

    gate = capability.readback_gate
    predict = gate.predict
    no_tools = {'get_toolset': lambda self: None, 'get_wrapper_toolset': lambda self, toolset: None}

    def without_prediction(hooks: tuple[Any, Any]) -> tuple[Any, Any]:
        """`hooks` swapped in with the read-back tool's prediction off, and both undone."""

        def enter() -> None:
            hooks[0]()
            gate.predict = None

        def leave() -> None:
            hooks[1]()
            gate.predict = predict

        return enter, leave

    return {
        'request hook (`before_model_request`)': swap(before_model_request=request),
        "read-back tool's prediction": (
            lambda: setattr(gate, 'predict', None),
            lambda: setattr(gate, 'predict', predict),
        ),
        'run hook (`wrap_run`)': swap(wrap_run=run),
        'tools (`get_toolset`, `get_wrapper_toolset`)': swap(**no_tools),
        # the parts share what a run meets first (its model, its new messages): alone they do not add up
        'every part at once': without_prediction(
            swap(before_model_request=request, wrap_run=run, **no_tools)
        ),
        # what any idle path keeps doing, nothing else: the floor of a request that changes nothing
        FLOOR: without_prediction(swap(before_model_request=_answered)),
        FLOOR_SKELETON: without_prediction(
            swap(before_model_request=_answered_unpublished, wrap_run=run, **no_tools)
        ),
    }


FLOOR = 'every request answered with its input check and its event only (no prediction)'
FLOOR_SKELETON = 'that, without the run hook, the stream event or the tools'


async def _answered(self: Any, ctx: Any, request_context: Any, publish_event: bool = True) -> Any:
    """The request hook reduced to what an idle path must still do for a request that changes nothing:
    check the input (incrementally, as the run's check does), record its `RequestProcessed`, and emit its
    `context_usage` stream event. No context, no byte bound, no stage asked."""
    from pydantic_ai_history.events import RequestProcessed, gathering, publish

    messages = request_context.messages
    run_id = self._runs.key(ctx)
    check = self._runs[run_id].input_check
    check.adopt(check.check(messages))
    window = self.limits_for(request_context.model).model_window
    with gathering() as stream_events:
        self._emit(
            RequestProcessed(
                run_id=run_id,
                messages_before=len(messages),
                messages_after=len(messages),
                tokens_before=0,
                tokens_after=0,
                tokenizer_tokens_after=0,
                context_window=window,
                duration_ms=0.0,
                anchored=False,
            )
        )
    if publish_event:
        await publish(ctx, stream_events)
    return request_context


async def _answered_unpublished(self: Any, ctx: Any, request_context: Any) -> Any:
    return await _answered(self, ctx, request_context, publish_event=False)


def breakdown(runs: int) -> dict[str, Any]:
    """The small run without a capability, with one that does nothing, with ours and with ours less each part,
    one run of each in turn (`_cpu_in_turn`)."""
    from pydantic_ai.capabilities import AbstractCapability

    class Nothing(AbstractCapability[Any]):
        """A capability with no hook of its own."""

    capability = _capability('ours')
    setups: dict[str, Setup] = {
        'without': (None, None, None),
        'nothing': (Nothing(), None, None),
        'ours': (capability, None, None),
        **{name: (capability, enter, leave) for name, (enter, leave) in _parts(capability).items()},
    }
    return _cpu_in_turn(setups, runs)


def render_breakdown(found: dict[str, float]) -> str:
    without, ours = found['without'], found['ours']
    lines = [
        'Small run, where ours spends its extra CPU (one process, one run of each in turn; medians):',
        '',
        '| run | CPU ms | over the run without |',
        '|---|---:|---:|',
        f'| without a capability | {without:.3f} | - |',
        f'| with a capability that does nothing | {found["nothing"]:.3f} | '
        f'{found["nothing"] - without:+.3f} ms ({found["nothing"] / without:.3f}x) |',
        f'| with ours | {ours:.3f} | {ours - without:+.3f} ms ({ours / without:.3f}x) |',
    ]
    for name, value in found.items():
        if name in (FLOOR, FLOOR_SKELETON):
            over = f'{value - without:+.3f} ms ({value / without:.3f}x)'
            lines.append(f'| ours, {name} | {value:.3f} | {over} |')
        elif name not in ('without', 'nothing', 'ours'):
            lines.append(f'| ours, {name} a pass-through | {value:.3f} | saves {ours - value:+.3f} ms |')
    return '\n'.join(lines)


def _intervals(capability: Any, history: list[Any]) -> list[float]:
    """ms from the run's start to its first request, then between requests (a tool round each)."""
    stamps: list[float] = []
    started = time.perf_counter()
    _agent(capability, IDLE_STEPS, stamps).run_sync('One more question.', message_history=history)
    return [(b - a) * 1000 for a, b in zip([started, *stamps], stamps, strict=False)]


def loaded_run(package: str | None, size: int) -> dict[str, Any]:
    """A run on the loaded history without the capability (after a warm-up run), then with a new one: the
    request path's time with it less without it (toolset preparation and every hook included), and the
    capability's `before_model_request` alone."""
    history = _history(size)
    _agent(None).run_sync('warm-up')
    gc.collect()
    bare = _intervals(None, history)
    out: dict[str, Any] = {}
    if package is not None:
        times: list[float] = []
        capability = _timed(_capability(package), times)
        gc.collect()
        found = _intervals(capability, history)
        out = {
            'first_ms': found[0] - bare[0],
            'idle_ms': statistics.median(found[WARM_REQUESTS:]) - statistics.median(bare[WARM_REQUESTS:]),
            'hook_first_ms': times[0],
            'hook_idle_ms': statistics.median(times[WARM_REQUESTS:]),
            'hook_warming_ms': statistics.median(times[1:WARM_REQUESTS]),
        }
    out['peak_mib'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def retained(package: str, conversations: int) -> dict[str, Any]:
    import tracemalloc

    capability = None if package == 'none' else _capability(package)
    _agent(capability).run_sync('warm-up')  # one-time loads (tokenizer, schemas) are not per conversation
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for i in range(conversations):
        history = _history(300)
        kwargs: dict[str, Any] = {'message_history': history, 'conversation_id': f'conversation-{i}'}
        try:
            _agent(capability).run_sync('One more question.', **kwargs)
        except TypeError:  # a pydantic-ai without conversation ids
            del kwargs['conversation_id']
            _agent(capability).run_sync('One more question.', **kwargs)
        del history, kwargs  # the last conversation's too
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return {'per_conversation_kib': held / conversations / 1024}


def import_cpu(package: str) -> dict[str, Any]:
    statement = (
        'import pydantic_ai_harness.compaction'
        if package == 'harness'
        else 'from pydantic_ai_history import create_history_processor'
    )
    code = (
        'import time, pydantic_ai\ncpu = time.process_time()\n'
        f'{statement}\nprint((time.process_time() - cpu) * 1000)'
    )
    env = _env(package)
    subprocess.run([sys.executable, '-c', code], check=True, env=env, capture_output=True)  # bytecode
    samples = []
    for _ in range(RUNS_IMPORT):
        done = subprocess.run(
            [sys.executable, '-c', code], check=True, env=env, capture_output=True, text=True
        )
        samples.append(float(done.stdout.split()[0]))
    return {'import_ms': statistics.median(samples)}


_STARTUP = """
import sys, time
sys.path.insert(0, {here!r})
import bench_overhead as b
b._agent(None).run_sync('warm-up')
cpu = time.process_time()
capability = b._capability({package!r})
b._agent(capability).run_sync('What is item 1?')
used = time.process_time() - cpu
cpu = time.process_time()
b._agent(None).run_sync('What is item 1?')
print((used - (time.process_time() - cpu)) * 1000)
"""


def startup_cpu(package: str) -> dict[str, Any]:
    """Import, build and a first small run with the capability, less the same run without it (CPU ms)."""
    code = _STARTUP.format(here=str(HERE), package=package)
    env = _env(package)
    subprocess.run([sys.executable, '-c', code], check=True, env=env, capture_output=True)  # bytecode
    samples = []
    for _ in range(RUNS_IMPORT):
        done = subprocess.run(
            [sys.executable, '-c', code], check=True, env=env, capture_output=True, text=True
        )
        samples.append(float(done.stdout.split()[-1]))
    return {'startup_ms': statistics.median(samples)}


def worker(args: argparse.Namespace) -> None:
    package = None if args.worker == 'none' else args.worker
    if args.measure == 'small':
        result = small_run(args.worker, args.runs, args.more_tools)
    elif args.measure == 'breakdown':
        result = breakdown(args.runs)
    elif args.measure == 'loaded':
        result = loaded_run(package, args.size)
    elif args.measure == 'retained':
        result = retained(args.worker, CONVERSATIONS)  # 'none': without the capability
    else:
        result = import_cpu(args.worker) if args.measure == 'import' else startup_cpu(args.worker)
    from importlib.metadata import version

    print(json.dumps({**result, 'pydantic_ai': version('pydantic-ai-slim')}))


# ---- the driver ----------------------------------------------------------------------------------------


def _env(package: str) -> dict[str, str]:
    unset = ('VIRTUAL_ENV', 'PYTHONPATH', 'PYTHONDONTWRITEBYTECODE')
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env['PYTHONPYCACHEPREFIX'] = str(DATA / 'pycache')
    env['TIKTOKEN_CACHE_DIR'] = str(ROOT.parent / 'shared' / 'tiktoken-cache')
    if package != 'harness':
        env['PYTHONPATH'] = os.environ.get('OVERHEAD_SRC') or str(ROOT / 'src')
    return env


def _measure(python: str, package: str, measure: str, **options: Any) -> dict[str, Any]:
    command = [python, __file__, '--worker', package, '--measure', measure]
    for key, value in options.items():
        command += [f'--{key}', str(value)]
    done = subprocess.run(command, env=_env(package), capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f'{package} {measure} failed:\n{done.stderr[-3000:]}')
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _histories() -> None:
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(ROOT / 'src'))
    import _sizes
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    DATA.mkdir(parents=True, exist_ok=True)
    for size in SIZES:
        path = DATA / f'overhead-{size}.json'
        if not path.exists():
            path.write_bytes(ModelMessagesTypeAdapter.dump_json(_sizes.build(size)))


def _harness(args: argparse.Namespace) -> tuple[str | None, str]:
    """An interpreter with harness and this package (ours is measured in it too: the same pydantic-ai)."""
    if args.no_harness:
        return None, 'harness skipped (--no-harness)'
    if args.harness_python:
        return args.harness_python, ''
    try:
        from bench_cost import _venv_python

        return str(_venv_python()), ''
    except Exception as exc:  # no uv, no network: ours alone
        return None, f'harness skipped: its venv could not be made ({type(exc).__name__}: {exc})'


SIDES = {'ours': 'ours', 'ours-beside': 'ours', 'harness': 'harness'}
"""Each column: the package measured. `ours` runs in this interpreter (its pydantic-ai); `ours-beside` in
harness's, beside it: the two packages on one pydantic-ai, which the ratios to harness are judged on."""


def _fmt(value: float | None, unit: str, digits: int = 2) -> str:
    return '-' if value is None else f'{value:.{digits}f} {unit}'


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    parser.add_argument('--measure', help=argparse.SUPPRESS)
    parser.add_argument('--size', type=int, default=300, help=argparse.SUPPRESS)
    parser.add_argument('--more-tools', type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument('--runs', type=int, default=RUNS_SMALL)
    parser.add_argument('--harness-python')
    parser.add_argument(
        '--ours-src', help="another checkout's src/ to measure as ours (e.g. before a change)"
    )
    parser.add_argument('--no-harness', action='store_true')
    parser.add_argument(
        '--alternated', type=int, default=ALTERNATED, help='processes per package, alternated idle measure'
    )
    parser.add_argument('--quick', action='store_true', help='fewer small runs (50)')
    parser.add_argument('--breakdown', action='store_true', help="where ours spends the small run's CPU")
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    sys.path.insert(0, str(HERE))
    runs = 50 if args.quick else args.runs
    if args.ours_src:
        os.environ['OVERHEAD_SRC'] = str(Path(args.ours_src).resolve())
    if args.breakdown:
        found = _measure(sys.executable, 'ours', 'breakdown', runs=runs)
        print(render_breakdown({name: cpu for name, cpu in found.items() if name != 'pydantic_ai'}))
        return None
    _histories()
    harness, note = _harness(args)
    pythons = {'ours': sys.executable} | ({'ours-beside': harness, 'harness': harness} if harness else {})
    results: dict[str, dict[str, Any]] = {}
    for side, python in pythons.items():
        package = SIDES[side]
        print(f'[overhead] {side}: {python}', flush=True)
        found: dict[str, Any] = {'small': _measure(python, package, 'small', runs=runs)}
        found['toolbox'] = _measure(python, package, 'small', runs=runs, **{'more-tools': TOOLBOX})
        for size in SIZES:
            found[f'loaded-{size}'] = _measure(python, package, 'loaded', size=size)
            found[f'bare-{size}'] = _measure(python, 'none', 'loaded', size=size)
        found['retained'] = _measure(python, package, 'retained')
        found['retained-bare'] = _measure(python, 'none', 'retained')
        found['import'] = _measure(python, package, 'import')
        found['startup'] = _measure(python, package, 'startup')
        results[side] = found
    alternated = _alternated(pythons, 3 if args.quick else args.alternated)
    versions = {side: found['small']['pydantic_ai'] for side, found in results.items()}
    print(render(results, note, runs, versions))
    print()
    print(render_alternated(alternated, versions))


def _alternated(pythons: dict[str, str], processes: int) -> dict[str, list[float]]:
    """`before_model_request`'s idle median at 300 messages, `processes` times per side, in turn."""
    found: dict[str, list[float]] = {side: [] for side in pythons}
    for _ in range(processes):
        for side, python in pythons.items():
            found[side].append(_measure(python, SIDES[side], 'loaded', size=300)['hook_idle_ms'])
    return found


def render_alternated(found: dict[str, list[float]], versions: dict[str, str]) -> str:
    processes = len(found['ours'])
    lines = [
        f'Idle request, 300 messages, `before_model_request` alone, alternated ({processes} processes each, '
        'one of each side in turn; the median of their medians and the range):',
        '',
    ]
    medians = {side: statistics.median(values) for side, values in found.items()}
    for side, values in found.items():
        label = f'{side} (pydantic-ai {versions[side]})'
        lines.append(f'- {label}: {medians[side]:.3f} ms ({min(values):.3f} to {max(values):.3f})')
    if 'harness' in medians:
        ratio = medians['ours-beside'] / medians['harness']
        verdict = 'met' if ratio <= 2 else 'missed'
        lines.append(
            f'- ours / harness on one pydantic-ai ({versions["harness"]}): {ratio:.2f}x (target <= 2x: '
            f'{verdict})'
        )
        lines.append(
            f'- ours on pydantic-ai {versions["ours"]} / harness on {versions["harness"]}: '
            f'{medians["ours"] / medians["harness"]:.2f}x (not like for like: each pydantic-ai does other '
            'work between the hooks)'
        )
    return '\n'.join(lines)


def render(results: dict[str, dict[str, Any]], note: str, runs: int, versions: dict[str, str]) -> str:
    def cell(package: str, get: Any, unit: str, digits: int = 2) -> str:
        found = results.get(package)
        return _fmt(get(found), unit, digits) if found is not None else '-'

    def peak(size: int) -> Any:
        return lambda r: r[f'loaded-{size}']['peak_mib'] - r[f'bare-{size}']['peak_mib']

    rows = [
        ('small run, CPU with the capability', lambda r: r['small']['with_ms'], 'ms', 2),
        ('small run, CPU without', lambda r: r['small']['without_ms'], 'ms', 2),
        ('small run, with / without (target ours <= 1.10x)', lambda r: r['small']['ratio'], 'x', 2),
        (f'small run, {TOOLBOX} more tools, CPU with', lambda r: r['toolbox']['with_ms'], 'ms', 2),
        (f'small run, {TOOLBOX} more tools, CPU without', lambda r: r['toolbox']['without_ms'], 'ms', 2),
        (f'small run, {TOOLBOX} more tools, with / without', lambda r: r['toolbox']['ratio'], 'x', 2),
        *(
            (
                f'idle request, {size:,} messages (target <= 2x harness)',
                _getter(f'loaded-{size}', 'idle_ms'),
                'ms',
                3,
            )
            for size in SIZES
        ),
        *(
            (
                f'first request on a loaded history, {size:,} messages',
                _getter(f'loaded-{size}', 'first_ms'),
                'ms',
                1,
            )
            for size in SIZES
        ),
        *(
            (
                f'  of it, `before_model_request` alone, idle, {size:,}',
                _getter(f'loaded-{size}', 'hook_idle_ms'),
                'ms',
                3,
            )
            for size in SIZES
        ),
        *(
            (
                f'  of it, `before_model_request` alone, requests 2 to {WARM_REQUESTS} (warm-up), {size:,}',
                _getter(f'loaded-{size}', 'hook_warming_ms'),
                'ms',
                3,
            )
            for size in SIZES
        ),
        *(
            (
                f'  of it, `before_model_request` alone, first, {size:,}',
                _getter(f'loaded-{size}', 'hook_first_ms'),
                'ms',
                1,
            )
            for size in SIZES
        ),
        *((f'peak memory over no package, {size:,} messages', peak(size), 'MiB', 1) for size in SIZES),
        (
            'retained per idle conversation (target ours <= 100 KiB)',
            lambda r: r['retained']['per_conversation_kib'],
            'KiB',
            1,
        ),
        ('  the same without the capability', lambda r: r['retained-bare']['per_conversation_kib'], 'KiB', 1),
        ('import, CPU (target ours <= 1.2x harness)', lambda r: r['import']['import_ms'], 'ms', 1),
        ('import + build + first small run, CPU over the run', _getter('startup', 'startup_ms'), 'ms', 1),
    ]
    lines = [
        f'Small runs: {runs} per side; idle: median of the {IDLE_STEPS + 1 - WARM_REQUESTS} requests after '
        f"the first {WARM_REQUESTS} (a fresh process's warm-up); retained: "
        f'{CONVERSATIONS} conversations of 300 messages; import: median of {RUNS_IMPORT}.',
        '',
        '| measure | ' + ' | '.join(f'{side} (pydantic-ai {versions[side]})' for side in results) + ' |',
        '|---|' + '---:|' * len(results),
    ]
    lines += [
        f'| {name} | ' + ' | '.join(cell(side, get, unit, d) for side in results) + ' |'
        for name, get, unit, d in rows
    ]
    if note:
        lines += ['', note]
    return '\n'.join(lines)


def _getter(key: str, field: str) -> Any:
    return lambda r: r[key][field]


if __name__ == '__main__':
    main()
