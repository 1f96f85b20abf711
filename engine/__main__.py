"""``python -m engine``: the edgeprof command line."""

from engine.cli import main

raise SystemExit(main())
