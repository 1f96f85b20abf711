"""``python -m engine.vm``: ``python -m engine.sandbox`` under its old name, for one
release."""

from __future__ import annotations

import sys

from engine.sandbox.__main__ import main

if __name__ == "__main__":
    print("warning: python -m engine.vm is now python -m engine.sandbox; the old name will be "
          "removed in the next release", file=sys.stderr)
    sys.exit(main())
