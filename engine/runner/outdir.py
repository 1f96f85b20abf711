"""Claiming a run folder: one run per ``--out`` at a time, and a result never lost.

``OutClaim(out, force)`` takes an exclusive lock (``flock`` on ``.<name>.lock`` beside
``out``; the kernel releases it even when the run is SIGKILLed) and refuses at once when
another run holds it, when ``out`` is not a folder, or when it holds an earlier run and
``force`` is not given. ``tempdir()`` gives the hidden, owner-stamped folder the run is
assembled in (leftovers of owners that died are swept when a claim is taken);
``publish(folder)`` renames it into place. With ``force`` an earlier run folder is
replaced only then, and only by a run that is a result (not one that failed).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
from pathlib import Path

from engine.errors import EdgeprofError, RunFailed
from engine.files import SNAKEMAKE_MARKER, naming, normal_mode
from engine.procs import stamped_tempdir, sweep

TEMP_KINDS = ("", "vm.", "old.")  # .<name>.<kind><pid>.<random>: assembly, vm share, replaced
SWAP_PREFIX = ".edgeprof-swap."  # + owner pid: the vm backend's swap images, beside --out
# what a run folder holds (engine.runner.folder, the child, the probes, the vm backend):
# --force replaces a folder only when it holds nothing else
RUN_FILES = frozenset({"meta.json", "spec.json", "child.json", "progress.jsonl", "tasks.csv",
                       "networks.csv", "samples.csv", "gnu_time.txt", "outputs.npz",
                       "cpu.prof", "heap", "console.log", "guest_job.log",
                       SNAKEMAKE_MARKER})
HEAP_FILE = re.compile(r"heap\.csv|tcmalloc\.csv|heap\.\d+\.heap")  # engine.probes.heap


class OutClaim:
    def __init__(self, out: str | os.PathLike, force: bool = False,
                 inputs: tuple[str | os.PathLike, ...] = ()) -> None:
        """``inputs``: files the run reads, which must not lie inside the folder ``force``
        would replace."""
        if not str(out).strip():
            raise EdgeprofError("--out is empty; name the run folder to write")
        # "x/new/.." is x: the name the folder is published under, not a path through it
        self.out = Path(os.path.normpath(out))
        try:
            resolved = self.out.resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop
            raise EdgeprofError(f"--out {out}: {exc}; choose another --out") from None
        if resolved in (Path.cwd(), *Path.cwd().parents):
            raise EdgeprofError(f"--out {out} is the working directory or above it; name a "
                                f"run folder of its own")
        for path in inputs:
            source = Path(path).resolve()
            if resolved in source.parents:
                raise EdgeprofError(f"--out {out} holds {path}, which this run reads; choose "
                                    f"an --out that does not contain its inputs")
            if source.is_dir() and (source == resolved or source in resolved.parents):
                raise EdgeprofError(f"--out {out} lies inside {path}, which this run reads; "
                                    f"choose a place outside it")
        inside = next((p for p in resolved.parents if (p / "meta.json").is_file()), None)
        if inside is not None:
            raise EdgeprofError(f"--out {out} lies inside the run folder {inside}; choose a "
                                f"place outside it")
        self.force = force
        self.parent = self.out.parent
        self.lock = self.parent / f".{self.out.name}.lock"
        self._fd: int | None = None
        fd = self._lock()
        self._fd = fd
        try:
            with naming(self.lock):  # a full disk is told where it hit
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            self._restore_replaced()
            self._check()
            for prefix in (*(f".{self.out.name}.{kind}" for kind in TEMP_KINDS), SWAP_PREFIX):
                sweep(self.parent, prefix)
        except BaseException:
            self.release()
            raise

    def _lock(self) -> int:
        while True:
            try:
                self.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.lock, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError as exc:
                raise EdgeprofError(f"cannot write the run folder {self.out}: "
                                    f"{exc.strerror or exc}; choose a writable --out") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise EdgeprofError(f"{self.out} is being written by another run (pid "
                                    f"{holder}); wait for it, or choose another --out") from None
            try:  # the holder may have unlinked the file before we locked it: lock anew
                if os.stat(self.lock).st_ino == os.fstat(fd).st_ino:
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)

    def _check(self) -> None:
        out = self.out
        if not (out.exists() or out.is_symlink()):
            return
        if not out.is_dir() or out.is_symlink():
            raise EdgeprofError(f"--out {out} exists and is not a run folder; remove it or "
                                f"choose another --out (--force replaces only a run folder)")
        if not (out / "meta.json").is_file():
            raise EdgeprofError(f"{out} holds files but no run (no meta.json); remove it or "
                                f"choose another --out (--force replaces only a run folder)")
        if not self.force:
            raise EdgeprofError(f"{out} already holds a finished run; pass --force to "
                                f"replace it")
        from engine.runner.meta import RunMeta

        try:  # what --force deletes must be a run's folder, not one with a meta.json in it
            RunMeta.read(out)
        except EdgeprofError as exc:
            raise EdgeprofError(f"{out} is not a run folder ({exc}); --force replaces only a "
                                f"run folder: remove it or choose another --out") from None
        strays = sorted(p.name for p in out.iterdir() if p.name not in RUN_FILES
                        or p.is_symlink() or p.is_dir() != (p.name == "heap"))
        heap = out / "heap"
        if heap.is_dir() and not heap.is_symlink():
            strays += sorted(f"heap/{p.name}" for p in heap.iterdir()
                             if not HEAP_FILE.fullmatch(p.name))
        if strays:
            raise EdgeprofError(f"{out} holds files no run writes ({', '.join(strays[:3])}"
                                f"{', ...' if len(strays) > 3 else ''}); --force replaces only "
                                f"a run folder: move them or choose another --out")

    def _restore_replaced(self) -> None:
        """A run killed inside ``publish`` with ``force`` left the run it replaced in an
        ``old.`` folder and none in ``out``: put it back before anything is swept."""
        if self.out.exists() or self.out.is_symlink():
            return
        for old in sorted(self.parent.glob(f".{self.out.name}.old.*/{self.out.name}")):
            if (old / "meta.json").is_file():
                os.replace(old, self.out)
                return

    def tempdir(self, kind: str = "") -> Path:
        """A fresh hidden folder beside ``out`` (``kind``: one of TEMP_KINDS)."""
        folder = stamped_tempdir(f".{self.out.name}.{kind}", self.parent)
        normal_mode(folder, directory=True)
        return folder

    def publish(self, folder: Path, failed: str | None = None) -> None:
        """Rename the finished ``folder`` to ``out``; an earlier run there is replaced only
        with ``force`` and by a result (a run that ended ok, memory or timeout; ``failed``:
        why the run ended ``error``), and removed only once the new one is in place."""
        out = self.out
        if not (out.exists() or out.is_symlink()):
            os.replace(folder, out)
            return
        if self.force and failed is not None:  # never the result it would replace
            kept = self.parent / f"{out.name}.failed.{os.getpid()}"
            os.replace(folder, kept)
            raise RunFailed(f"the run failed ({failed}); --force replaces a run only with "
                            f"one that ends ok, memory or timeout: the earlier run in {out} "
                            f"is kept, this one's record is in {kept}")
        if not self.force:  # made by hand while the run went on: keep both
            kept = self.parent / f"{out.name}.{os.getpid()}"
            os.replace(folder, kept)
            raise EdgeprofError(f"{out} appeared while this run went on; its result is kept "
                                f"in {kept}")
        old = self.tempdir("old.")
        os.replace(out, old / out.name)
        os.replace(folder, out)
        shutil.rmtree(old, ignore_errors=True)

    def release(self) -> None:
        if self._fd is None:
            return
        # unlink before unlocking: a run that opens the name afterwards makes a new lock
        # file and then finds the published folder
        try:
            os.unlink(self.lock)
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> OutClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
