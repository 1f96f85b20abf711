"""``python -m engine``: the edgeprof command line."""

import signal
import sys

try:
    from engine.cli import main

    code = main()
except KeyboardInterrupt:  # Ctrl-C while Python was still importing, before any handler
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # first: a second one must not kill us
    print("error: interrupted", file=sys.stderr)
    code = 130
# The answer is given: a Ctrl-C arriving now must not turn it into a death by signal
# during the interpreter's shutdown.
signal.signal(signal.SIGINT, signal.SIG_IGN)
raise SystemExit(code)
