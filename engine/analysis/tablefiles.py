"""Tables on disk: a set written whole (``write_tables``), the per-run tidy folders of the
tidy verb written with their SHA-256s (``write_tidy``); many runs' tidy tables stacked
(``stack``)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from engine.analysis.tidy import TIDY_TABLES
from engine.errors import EdgeprofError
from engine.files import atomic_path

TIDY_DIGESTS = "digests.json"  # each tidy table's SHA-256, as tidy wrote it


def write_tidy(tables: dict[str, pd.DataFrame], out_dir: str | os.PathLike) -> None:
    """One Parquet file per tidy table in ``out_dir``, and their SHA-256s
    (``TIDY_DIGESTS``: a reader can tell a table edited since)."""
    from engine.files import sha256_file, write_text_atomic

    digests = {}
    for name, df in tables.items():
        with atomic_path(Path(out_dir) / f"{name}.parquet") as tmp:
            df.to_parquet(tmp)
        digests[f"{name}.parquet"] = sha256_file(Path(out_dir) / f"{name}.parquet")
    write_text_atomic(Path(out_dir) / TIDY_DIGESTS, json.dumps(digests, indent=1))


def check_table_outputs(out_dir: str | os.PathLike, names: Iterable[str],
                        files: Iterable[str] = ()) -> None:
    """Every place ``write_tables`` would write (``<name>.csv`` and ``.parquet`` per name,
    and ``files``) takes a file: checked before the work, one line naming the first that
    does not."""
    from engine.files import check_output_file

    out = Path(out_dir)
    try:
        for name in names:
            for ext in ("csv", "parquet"):
                check_output_file(out / f"{name}.{ext}", "an output table")
        for name in files:
            check_output_file(out / name, "an output file")
    except ValueError as exc:
        raise EdgeprofError(str(exc)) from None


def write_tables(tables: dict[str, pd.DataFrame], out_dir: str | os.PathLike,
                 texts: dict[str, str] | None = None) -> None:
    """``<name>.csv`` and ``<name>.parquet`` per table, and each of ``texts`` (file name ->
    its text), moved into place together (every target checked first, so a folder in one's
    place leaves none of them half a set)."""
    from engine.files import made_folder, naming, staged

    out = Path(out_dir)
    check_table_outputs(out, tables, texts or {})
    # a failed writer (a full disk) leaves no --out it created; an interrupted one none of
    # the set. pyarrow's and pandas' write errors carry no file name: each names the file
    # it was writing, as the user will find it (not the hidden staging folder)
    with made_folder(out), staged(out, ".tables.") as tmp:
        for name, df in tables.items():
            with naming(out / f"{name}.csv"):
                df.to_csv(tmp / f"{name}.csv", index=False)
            with naming(out / f"{name}.parquet"):
                df.to_parquet(tmp / f"{name}.parquet", index=False)
        for name, text in (texts or {}).items():
            with naming(out / name):
                (tmp / name).write_text(text)


def concat_tables(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """``frames`` stacked, the empty ones left out (an empty frame when none is left)."""
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def stack(tidies: Iterable[Mapping[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """The tidy tables (``TIDY_TABLES``) of many runs, each table stacked over them."""
    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in TIDY_TABLES}
    for tables in tidies:
        for name in TIDY_TABLES:
            parts[name].append(tables[name])
    return {name: concat_tables(frames) for name, frames in parts.items()}
