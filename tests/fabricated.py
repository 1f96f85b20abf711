"""Helpers for tests that fabricate a run by editing a real one's files."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

_edits = itertools.count(1)


def edit_meta(folder: Path, **changes) -> dict:
    """Rewrite the run's meta.json with ``changes`` applied, its record digest renewed as a
    run's own write would; returns the new record. A fabricated run (mostly an edited
    copy) starts at its own instant, a millisecond apart, unless ``started_at`` is given:
    the tables refuse two folders of one run."""
    from engine.runner.meta import record_digest

    meta = json.loads((folder / "meta.json").read_text())
    if meta.get("started_at") is not None:
        meta["started_at"] += 1e-3 * next(_edits)
    meta |= changes
    meta["record_digest"] = record_digest(meta)
    (folder / "meta.json").write_text(json.dumps(meta))
    return meta


def record_tables(folder: Path) -> None:
    """A fabricated run records its edited tables' digests, as a run records its own."""
    from engine.files import sha256_file

    edit_meta(folder, table_digests={name: sha256_file(folder / name)
                                     for name in ("tasks.csv", "networks.csv", "samples.csv")
                                     if (folder / name).is_file()})
