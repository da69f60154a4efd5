"""The `pydantic-ai-history` command line: `demo`, `inspect`, `count`, `eval` and `prune`.

Exit codes: 0 success; 1 processing error (the input was fine, processing failed); 2 usage or input error
(bad arguments, a missing file, invalid JSON, a file that is not a history, an unknown context window).
User errors are one line on stderr, never a traceback. Each command's work is a module of its own here
(`count`, `demo`, `eval`, `inspect`, `prune`); this module parses the arguments and dispatches.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..evaluation import STRATEGIES
from .common import EXIT_OK, EXIT_PROCESSING, EXIT_USAGE, CliError, load_history
from .count import CountReport, count_history, count_messages, render_count
from .demo import DemoResult, DemoSettings, run_demo
from .eval import run_eval
from .inspect import InspectReport, inspect_history, inspect_messages, render_inspect
from .prune import parse_size, run_prune

__all__ = (
    'EXIT_OK',
    'EXIT_PROCESSING',
    'EXIT_USAGE',
    'CliError',
    'CountReport',
    'DemoResult',
    'DemoSettings',
    'InspectReport',
    'build_parser',
    'count_history',
    'count_messages',
    'inspect_history',
    'inspect_messages',
    'load_history',
    'main',
    'parse_size',
    'render_count',
    'render_inspect',
    'run_demo',
    'run_eval',
    'run_prune',
)

PROG = 'pydantic-ai-history'
_N = TypeVar('_N', int, float)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        raise CliError(message, EXIT_USAGE)


def _argument(
    parse: Callable[[str], _N], valid: Callable[[_N], bool], kind: str, bound: str
) -> Callable[[str], _N]:
    """An argparse `type` that parses with `parse` and accepts what `valid` says, naming `kind` or `bound`."""

    def convert(text: str) -> _N:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f'{text!r} is not {kind}') from None
        if not valid(value):
            raise argparse.ArgumentTypeError(f'{text!r} must be {bound}')
        return value

    return convert


_positive = _argument(
    lambda t: int(t.replace('_', '').replace(',', '')), lambda v: v > 0, 'a whole number', 'positive'
)
_days = _argument(float, lambda v: v > 0, 'a number of days', 'positive')
_fraction = _argument(float, lambda v: 0 < v < 1, 'a number', 'between 0 and 1')
_count_arg = _argument(int, lambda v: v >= 0, 'a whole number', '0 or more')
_seconds = _argument(float, lambda v: v > 0, 'a number of seconds', 'positive')


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description='Keep PydanticAI histories inside their context window: a demo, and saved-history tools.',
        epilog='exit codes: 0 ok, 1 processing error, 2 usage or input error',
    )
    parser.add_argument(
        '-v', '--verbose', action='store_true', help="log the processor's decisions to stderr"
    )
    sub = parser.add_subparsers(dest='command', metavar='COMMAND', parser_class=_Parser)
    sub.required = True

    demo = sub.add_parser('demo', help='run a long agent session through the processor (no API key needed)')
    demo.add_argument(
        '--requests', type=_positive, default=150, metavar='N', help='model requests (default 150)'
    )
    demo.add_argument(
        '--model',
        metavar='PROVIDER:NAME',
        help='run against a real model (its API key must be set); default: local',
    )
    demo.add_argument('--quiet', action='store_true', help='print only the final summary')

    inspect = sub.add_parser('inspect', help='show what the processor would do to a saved history (dry run)')
    inspect.add_argument(
        'history', metavar='HISTORY.json', help='saved with ModelMessagesTypeAdapter.dump_json'
    )
    inspect.add_argument(
        '--max-tokens',
        type=_positive,
        metavar='N',
        help='compaction trigger (default: follows the model, 80%% of its input room, at most 120,000)',
    )
    inspect.add_argument(
        '--target-tokens',
        type=_positive,
        metavar='N',
        help='compaction target (default: a third of the trigger, at most 40,000)',
    )
    inspect.add_argument(
        '--context-window', type=_positive, metavar='N', help="override the model's context window"
    )
    inspect.add_argument(
        '--model', metavar='NAME', help='counting and window model (default: the model named in the history)'
    )
    inspect.add_argument(
        '--summarizer-model',
        metavar='PROVIDER:NAME',
        help='summarize with this model (default: no LLM calls)',
    )
    inspect.add_argument('--json', action='store_true', help='print the report as JSON')
    inspect.add_argument('--out', metavar='FILE', help='write the processed history (JSON) to FILE')

    count = sub.add_parser('count', help='token counts per message and in total')
    count.add_argument('history', metavar='HISTORY.json')
    count.add_argument(
        '--model', metavar='NAME', help="tokenizer model (default: the history's; else 'other')"
    )
    count.add_argument('--json', action='store_true', help='print the counts as JSON')
    _add_eval(sub)
    _add_prune(sub)
    return parser


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_prune(sub: argparse._SubParsersAction[Any]) -> None:
    prune = sub.add_parser(
        'prune',
        help="apply a store's retention now: delete what is older than its age bound, then the oldest past "
        'its size bound',
    )
    prune.add_argument('root', nargs='?', metavar='ROOT', help='a DirectoryStore root folder')
    prune.add_argument('--redis', metavar='URL', help='a RedisStore server instead of a folder')
    prune.add_argument(
        '--prefix', metavar='PREFIX', help="the RedisStore's key prefix (default: its default)"
    )
    prune.add_argument(
        '--max-age', type=_days, metavar='DAYS', help='delete what was not used for this long (default 30)'
    )
    prune.add_argument(
        '--max-bytes',
        type=_size,
        metavar='SIZE',
        help='then the oldest until this much is held, e.g. 500MB (default: 1GiB folder, 256MiB Redis)',
    )


def _add_eval(sub: argparse._SubParsersAction[Any]) -> None:
    evaluation = sub.add_parser(
        'eval',
        help='probe evaluation: what each compaction strategy keeps of saved sessions (offline by default)',
    )
    evaluation.add_argument(
        'histories',
        nargs='*',
        metavar='HISTORY.json',
        help='saved histories (default: the built-in set, ../shared/fixtures/conversations)',
    )
    model = 'PROVIDER:NAME'
    evaluation.add_argument(
        '--summarizer', metavar=model, help='summarizer model (default: scripted, offline)'
    )
    evaluation.add_argument('--answerer', metavar=model, help='answers the probes (with --judge)')
    evaluation.add_argument('--judge', metavar=model, help='grades the answers 0-5 on six dimensions')
    evaluation.add_argument('--probe-model', metavar=model, help='also writes continuation/decision probes')
    evaluation.add_argument(
        '--keep-fraction',
        type=_fraction,
        default=0.3,
        metavar='F',
        help='share of each session kept verbatim (default 0.3)',
    )
    evaluation.add_argument(
        '--strategies',
        metavar='A,B',
        help=f'the strategies to run, comma-separated: {", ".join(STRATEGIES)} (default: all; a peer not '
        'installed is then listed as such)',
    )
    evaluation.add_argument(
        '--model',
        metavar=model,
        help='the model under test: answers the hand-written probes from the full history, the compacted one '
        'with read_artifact, and without tools (default: a scripted reader, offline; e.g. openai-chat:NAME '
        'with OPENAI_BASE_URL for a local server)',
    )
    evaluation.add_argument(
        '--probes',
        type=_count_arg,
        metavar='N',
        help='hand-written probes answered per session at most (default: all; 0: none)',
    )
    evaluation.add_argument(
        '--reader-timeout',
        type=_seconds,
        default=600.0,
        metavar='SECONDS',
        help="each of --model's requests may take this long (default 600: a small local model is slow)",
    )
    evaluation.add_argument(
        '--conditions',
        metavar='A,B',
        help="which of the --model's conditions to run: full (a), readback (b), no_tools (c) (default: all)",
    )
    evaluation.add_argument(
        '--recall-chars',
        type=_count_arg,
        default=0,
        metavar='N',
        help="ours' (b) with recall: up to N characters of stored passages matching each probe are put "
        'with it (CompactionSettings.recall_chars; default 0: read_artifact alone)',
    )
    evaluation.add_argument('--json', metavar='OUT.json', help='also write the full report as JSON')


def _inspect(args: argparse.Namespace) -> int:
    out_path = Path(args.out) if args.out else None
    if out_path is not None and not out_path.parent.exists():
        raise CliError(f'--out {args.out}: the folder {out_path.parent} does not exist')
    report = inspect_history(
        args.history,
        model=args.model,
        max_tokens=args.max_tokens,
        target_tokens=args.target_tokens,
        context_window=args.context_window,
        summarizer_model=args.summarizer_model,
    )
    print(report.to_json() if args.json else render_inspect(report))
    if out_path is not None:
        from pydantic_ai.messages import ModelMessagesTypeAdapter

        try:
            out_path.write_bytes(ModelMessagesTypeAdapter.dump_json(report.output, indent=2))
        except OSError as exc:
            raise CliError(f'--out {args.out}: cannot write ({exc.strerror or exc})') from exc
        if not args.json:
            print(f'processed history written to {out_path}')
    return EXIT_OK


def _count(args: argparse.Namespace) -> int:
    report = count_history(args.history, args.model)
    print(report.to_json() if args.json else render_count(report))
    return EXIT_OK


def _eval(args: argparse.Namespace) -> int:
    run_eval(
        args.histories,
        summarizer=args.summarizer,
        answerer=args.answerer,
        judge=args.judge,
        probe_model=args.probe_model,
        keep_fraction=args.keep_fraction,
        json_path=args.json,
        strategies=args.strategies,
        model=args.model,
        probes=args.probes,
        reader_timeout=args.reader_timeout,
        conditions=args.conditions,
        recall_chars=args.recall_chars,
    )
    return EXIT_OK


def _prune(args: argparse.Namespace) -> int:
    report = run_prune(
        args.root,
        redis_url=args.redis,
        prefix=args.prefix,
        max_age=None if args.max_age is None else args.max_age * 86_400,
        max_bytes=args.max_bytes,
    )
    print(report)
    return EXIT_OK


def _demo(args: argparse.Namespace) -> int:
    result = run_demo(args.requests, model=args.model, quiet=args.quiet)
    return EXIT_PROCESSING if result.rejected else EXIT_OK


def _configure_logging(verbose: bool) -> None:
    logger = logging.getLogger('pydantic_ai_history')
    for old in [h for h in logger.handlers if h.get_name() == PROG]:  # from an earlier `main()` call
        logger.removeHandler(old)
    if verbose:
        handler: logging.Handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter('%(levelname)s %(name)s: %(message)s'))
        logger.setLevel(logging.INFO)
    else:
        # The reports show every warning as an event already; without a handler Python would print them again.
        handler = logging.NullHandler()
    handler.set_name(PROG)
    logger.addHandler(handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (the console script exits with it)."""
    try:
        args = build_parser().parse_args(argv)
        _configure_logging(args.verbose)
        handlers = {'demo': _demo, 'inspect': _inspect, 'count': _count, 'eval': _eval, 'prune': _prune}
        return handlers[args.command](args)
    except CliError as exc:
        print(f'{PROG}: error: {exc}', file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print(f'{PROG}: interrupted', file=sys.stderr)
        return 130
    except BrokenPipeError:  # `... | head`
        return EXIT_OK
    except Exception as exc:
        print(f'{PROG}: error: {type(exc).__name__}: {exc}', file=sys.stderr)
        return EXIT_PROCESSING


if __name__ == '__main__':
    sys.exit(main())
