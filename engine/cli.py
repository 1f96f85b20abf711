"""Command line of the engine: one subcommand per workflow stage.

Every subcommand reports bad input as one line naming the problem and exits 2; a file it
could not write (a full disk, a quota) or a run that came to nothing exits 1; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import resource
import signal
import sys
from typing import NoReturn

from engine.errors import EdgeprofError, RunFailed
from engine.files import is_write_failure, write_failure
from engine.log import configure as configure_log
from engine.signals import Signalled, caught_signal

# Every verb, in the order --help lists them; its module in engine.commands is its name
# with "_" for "-", and adds its own parser (engine/commands/__init__.py says how). A
# command imports its own verb's module only: every run's supervisor and measured child
# is such a command, and the other verbs' imports cost each a few hundredths of a second
# (more in a sandbox; docs/performance.md).
COMMANDS = ("models", "split", "forward", "pipelines", "run", "run-block", "supervise",
            "child", "tidy", "advise", "fit-model", "evaluate-model", "reconstruct-model",
            "calibrate", "model-report", "score-holdout", "results-report", "doctor", "graph")


class _Parser(argparse.ArgumentParser):
    """Bad arguments are one line, as every other bad input (``--help`` shows usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: of every verb, or of ``verb`` alone (one of
    ``COMMANDS``)."""
    parser = _Parser(prog="python -m engine", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        if verb in (None, name):
            importlib.import_module(f"engine.commands.{name.replace('-', '_')}").add_parser(sub)
    for verb in sub.choices.values():  # every verb's messages (engine.log)
        loudness = verb.add_mutually_exclusive_group()
        loudness.add_argument("-v", "--verbose", dest="verbosity", action="store_const",
                              const=1, default=0, help="details too")
        loudness.add_argument("-q", "--quiet", dest="verbosity", action="store_const",
                              const=-1, help="warnings only (errors always)")
    return parser


# the options and arguments that name a file or folder, where '.' is the way to say "here"
PATH_OPTIONS = {"description", "dir", "estimates", "model", "out", "pipeline", "split",
                "prototxt", "request", "runs", "spec", "tables", "work"}


def _empty_value(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """What to say of the first option or argument given as an empty string (a path such
    as --split '' would name the current folder): no verb takes one."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for action in sub.choices[args.command]._actions:
        value = getattr(args, action.dest, None)
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, str) and not v.strip() for v in values):
            name = action.option_strings[0] if action.option_strings else action.dest
            hint = " (for a folder, '.' names this one)" if action.dest in PATH_OPTIONS else ""
            return f"{name} is empty; give a value{hint}"
    return None


def _hold_signals() -> None:
    """Interrupted, and exiting: a second Ctrl-C (or TERM, HUP) a few ms after the first
    must not kill the process on its way out with a signal instead of exit 130."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def reader_gone() -> int:
    """Standard output's reader went away (``advise | head``): end quietly, as a shell
    tool killed by SIGPIPE does, with nothing more sent to the closed pipe at exit."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 128 + signal.SIGPIPE


def out_of_memory() -> str:
    """What a MemoryError of the engine itself says: how much it could have had."""
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft != resource.RLIM_INFINITY:
        return (f"the engine ran out of memory: its address space is limited to "
                f"{soft / 2**20:.0f} MiB (ulimit -v {soft // 1024}); raise or lift that "
                f"limit")
    return ("the engine ran out of memory (no address-space limit is set: the host's RAM "
            "and swap ran short); free memory, or run it where more is available")


def main(argv: list[str] | None = None) -> int:
    configure_log(0)  # an option's warning while parsing shows, whatever the verbosity
    argv = sys.argv[1:] if argv is None else argv
    # a known verb first: its parser alone (anything else: every verb's, for --help and
    # the message that names them)
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    configure_log(args.verbosity)
    empty = _empty_value(parser, args)
    if empty is not None:
        print(f"error: {empty}", file=sys.stderr)
        return 2
    try:
        return args.func(args) or 0
    except EdgeprofError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:  # not bad input: the run itself came to nothing
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before a run's own handlers are installed, or outside one
        _hold_signals()
        print("error: interrupted", file=sys.stderr)
        return 130
    except Signalled as exc:  # a verb that cleans up on SIGTERM/SIGHUP too (models, split)
        return _interrupted(exc)
    except OSError as exc:  # a path the command cannot read or write
        if isinstance(exc, BrokenPipeError) and exc.filename is None:
            return reader_gone()
        if is_write_failure(exc):  # a full disk, a quota: not bad input
            print(f"error: {write_failure(exc)}", file=sys.stderr)
            return 1
        where = f" {exc.filename}" if exc.filename else ""
        print(f"error: cannot use{where}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except MemoryError:  # the engine's own allocation failed: not bad input (a batch
        # too large for the host is refused by check_batch_fits, exit 2, before this)
        print(f"error: {out_of_memory()}", file=sys.stderr)
        return 1
    except Exception:
        caught = caught_signal()
        if caught is None:
            raise
        # the signal's exception, turned into another on its way up (raised inside an
        # extension module's import, a lazy one such as pyarrow's at a table's write):
        # the cleanup ran all the same, and the command was interrupted (-v shows it)
        logging.getLogger(__name__).debug("after the signal", exc_info=True)
        return _interrupted(caught)


def _interrupted(exc: Signalled) -> int:
    _hold_signals()
    said = "its outputs were written whole before it" if exc.committed else "nothing written"
    print(f"error: interrupted by {exc.name}; {said}", file=sys.stderr)
    return 130
