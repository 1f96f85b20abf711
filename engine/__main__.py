"""``python -m engine``, and the ``edgeprof`` command pip installs: the edgeprof command
line, ended in one line and an exit status whenever it is stopped."""

import signal
import sys
from typing import NoReturn


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # ended as a Ctrl-C is: one line, exit 130


def main() -> NoReturn:
    # SIGTERM and SIGHUP before a verb installs its own handlers (while Python imports)
    # end the command as a Ctrl-C does, not as a death by signal; one the process was
    # started with ignored (nohup) stays ignored.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _interrupted)
    try:
        from engine.signals import redeliver_lost_signals

        # logging's callbacks around every fork (and finalizers) drop a signal's exception
        sys.unraisablehook = redeliver_lost_signals
        from engine.cli import main as cli_main
        from engine.cli import reader_gone

        try:
            code = cli_main()
        except SystemExit as exc:  # argparse's --help and usage errors
            code = exc.code
        except BrokenPipeError:
            code = reader_gone()
        try:
            sys.stdout.flush()  # here, not at exit: a reader gone is then an answer
        except BrokenPipeError:
            code = reader_gone()
    except KeyboardInterrupt:  # Ctrl-C while Python was still importing, before any handler
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # first: a second one must not kill us
        print("error: interrupted", file=sys.stderr)
        code = 130
    # The answer is given: a Ctrl-C arriving now must not turn it into a death by signal
    # during the interpreter's shutdown.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A KeyboardInterrupt that left code compiled from a string (the __init__ a dataclass
    # or a namedtuple generates while a module is imported) sets CPython's "unhandled
    # Ctrl-C" flag, which stays set although we caught it; at exit CPython then kills
    # itself with SIGINT instead of exiting 130. Running a string clears the flag (CPython
    # resets it at the start of every such run).
    exec("")  # noqa: S102
    raise SystemExit(code)


if __name__ == "__main__":
    main()
