"""Helpers for tests that fabricate a run by editing a real one's files."""

from __future__ import annotations

import json
from pathlib import Path


def edit_meta(folder: Path, **changes) -> dict:
    """Rewrite the run's meta.json with ``changes`` applied, its record digest renewed as a
    run's own write would; returns the new record."""
    from engine.runner.meta import record_digest

    meta = json.loads((folder / "meta.json").read_text()) | changes
    meta["record_digest"] = record_digest(meta)
    (folder / "meta.json").write_text(json.dumps(meta))
    return meta


def record_tables(folder: Path) -> None:
    """A fabricated run records its edited tables' digests, as a run records its own."""
    from engine.files import sha256_file

    edit_meta(folder, table_digests={name: sha256_file(folder / name)
                                     for name in ("tasks.csv", "networks.csv", "samples.csv")
                                     if (folder / name).is_file()})
