"""Tables on disk: a set written whole (``write_tables``), and the per-run tidy folders
written with their SHA-256s and read back checked against them (``write_tidy``,
``read_tidy``)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from engine.analysis.tidy import TIDY_TABLES
from engine.errors import EdgeprofError
from engine.files import atomic_path

TIDY_DIGESTS = "digests.json"  # each tidy table's SHA-256, as tidy wrote it


def write_tidy(tables: dict[str, pd.DataFrame], out_dir: str | os.PathLike) -> None:
    """One Parquet file per tidy table in ``out_dir``, and their SHA-256s
    (``TIDY_DIGESTS``), which ``read_tidy`` checks."""
    from engine.files import sha256_file, write_text_atomic

    digests = {}
    for name, df in tables.items():
        with atomic_path(Path(out_dir) / f"{name}.parquet") as tmp:
            df.to_parquet(tmp)
        digests[f"{name}.parquet"] = sha256_file(Path(out_dir) / f"{name}.parquet")
    write_text_atomic(Path(out_dir) / TIDY_DIGESTS, json.dumps(digests, indent=1))


def check_tidy(folder: Path, fix: str = "remove the folder and tidy the run again") -> None:
    """Each tidy table of ``folder`` is the one tidy wrote (its SHA-256): a table copied
    from another run or edited by hand is refused, naming it and ``fix``."""
    from engine.files import parse_json, read_regular, sha256_file

    try:
        digests = parse_json(read_regular(folder / TIDY_DIGESTS, "digest file", 2**20))
    except (OSError, ValueError):
        raise EdgeprofError(f"{folder} has no readable {TIDY_DIGESTS} (its tables' "
                            f"SHA-256s); {fix}") from None
    if not isinstance(digests, dict):
        raise EdgeprofError(f"{folder / TIDY_DIGESTS} is not tidy's record of its tables' "
                            f"SHA-256s (a JSON object); {fix}")
    for name in TIDY_TABLES:
        path = folder / f"{name}.parquet"
        if digests.get(path.name) != sha256_file(path):
            raise EdgeprofError(f"{path} is not the table tidy wrote (its SHA-256 differs); "
                                f"{fix}")


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


def tidy_run_table(tidy_dir: str | os.PathLike) -> pd.DataFrame:
    """The runs table of one tidy folder (checked as ``read_tidy`` checks it)."""
    check_tidy(Path(tidy_dir))
    return pd.read_parquet(Path(tidy_dir) / "runs.parquet")


def read_tidy(tidy_dirs: Iterable[str | os.PathLike]) -> dict[str, pd.DataFrame]:
    """The tidy tables (``TIDY_TABLES``) of these per-run tidy folders, concatenated."""
    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in TIDY_TABLES}
    for d in tidy_dirs:
        check_tidy(Path(d))
        for name in TIDY_TABLES:
            parts[name].append(pd.read_parquet(Path(d) / f"{name}.parquet"))
    return {name: concat_tables(frames) for name, frames in parts.items()}
