"""Heap profiles from real tcmalloc dumps: a preloaded subprocess allocates numpy arrays of
known sizes between dumps."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import EdgeprofError
from engine.probes import tcmalloc
from engine.probes.heap import PROPERTIES, HeapDumper, parse_heap_profile

MiB = 2**20
try:
    tcmalloc.library_path()
    HAVE_TCMALLOC = True
except EdgeprofError:
    HAVE_TCMALLOC = False
needs_tcmalloc = pytest.mark.skipif(
    not HAVE_TCMALLOC, reason="libtcmalloc.so.4 missing: apt-get install libgoogle-perftools4")

SCRIPT = """
import json, sys
import numpy as np
from pathlib import Path
from engine.probes.heap import HeapDumper

d = HeapDumper()
d.start(Path(sys.argv[1]))
numbers = [d.dump("before")]
a, b = np.ones(40 * 2**20 // 8), np.ones(24 * 2**20 // 8)
numbers.append(d.dump(("task", 7, "end")))
del a
numbers.append(d.dump("freed"))
for _ in range(12):  # 1.2 GB allocated in all: past the default automatic-dump interval
    x = np.ones(100 * 2**20 // 8)
    del x
keep = np.ones(150 * 2**20 // 8)  # in-use growth past the default 100 MiB interval
numbers.append(d.dump("churn"))
ints = list(range(10**6))  # 8 MB pointer array via malloc, 28 MB of ints via pymalloc
numbers.append(d.dump("ints"))
d.stop()
d2 = HeapDumper()
d2.start(Path(sys.argv[2]))
numbers.append(d2.dump("second profile"))
d2.stop()
print(json.dumps(numbers))
"""


def _run(tmp_path: Path, script: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, str(tmp_path / "heap"),
                           str(tmp_path / "heap2")], env=env, capture_output=True, text=True)


@pytest.fixture(scope="module")
def dumped(tmp_path_factory) -> tuple[Path, list[int], str]:
    if not HAVE_TCMALLOC:
        pytest.skip("libtcmalloc.so.4 missing: apt-get install libgoogle-perftools4")
    tmp = tmp_path_factory.mktemp("heap")
    proc = _run(tmp, SCRIPT, tcmalloc.preload_env(dict(os.environ)))
    assert proc.returncode == 0, proc.stderr
    return tmp, json.loads(proc.stdout), proc.stderr


@needs_tcmalloc
def test_dumps_are_numbered_in_call_order_with_no_automatic_or_exit_dumps(dumped):
    tmp, numbers, stderr = dumped
    assert numbers == [1, 2, 3, 4, 5, 6]
    assert sorted(p.name for p in (tmp / "heap").glob("*.heap")) == [
        f"heap.{n:04d}.heap" for n in range(1, 6)]
    # gperftools' counter is process-wide: a second profile continues it
    assert [p.name for p in (tmp / "heap2").glob("*.heap")] == ["heap.0006.heap"]
    assert "Dumping heap profile" not in stderr  # PERFTOOLS_VERBOSE=-1


@needs_tcmalloc
def test_in_use_bytes_follow_the_arrays_allocated_and_freed(dumped):
    tmp, _, _ = dumped
    p = [parse_heap_profile(tmp / "heap" / f"heap.{n:04d}.heap") for n in range(1, 6)]
    inuse = [d["inuse_bytes"] for d in p]
    assert inuse[0] < MiB  # only allocations since start() are visible
    assert inuse[1] - inuse[0] == pytest.approx(64 * MiB, rel=0.01)
    assert inuse[1] - inuse[2] == pytest.approx(40 * MiB, rel=0.01)
    assert inuse[3] - inuse[2] == pytest.approx(150 * MiB, rel=0.01)
    assert p[3]["alloc_bytes"] - p[2]["alloc_bytes"] == pytest.approx(1350 * MiB, rel=0.01)
    assert p[1]["alloc_objects"] > p[0]["alloc_objects"] and p[1]["inuse_objects"] >= 2
    # pymalloc's arenas are mmapped: the million ints do not show, the list's array does
    assert 8e6 <= inuse[4] - inuse[3] < 8.5e6


@needs_tcmalloc
def test_tcmalloc_stats_are_recorded_at_each_dump(dumped):
    tmp, _, _ = dumped
    rows = list(csv.DictReader(open(tmp / "heap" / "tcmalloc.csv")))
    assert [int(r["dump"]) for r in rows] == [1, 2, 3, 4, 5]
    assert rows[1]["label"] == "task 7 end"
    assert set(PROPERTIES.values()) <= set(rows[0])
    assert all(r[c] != "" for r in rows for c in PROPERTIES.values())
    cur = [int(r["tc_current_allocated_bytes"]) for r in rows]
    assert cur[1] - cur[0] == pytest.approx(64 * MiB, rel=0.02)
    assert cur[1] - cur[2] == pytest.approx(40 * MiB, rel=0.02)
    heap_size = [int(r["tc_heap_size_bytes"]) for r in rows]
    assert all(h >= c for h, c in zip(heap_size, cur))
    assert [int(r["t_ns"]) for r in rows] == sorted(int(r["t_ns"]) for r in rows)


@needs_tcmalloc
def test_automatic_dump_intervals_left_on_are_refused(tmp_path):
    env = tcmalloc.preload_env(dict(os.environ))
    del env["HEAP_PROFILE_INUSE_INTERVAL"]  # back to gperftools' 100 MiB default
    proc = _run(tmp_path, SCRIPT, env)
    assert proc.returncode != 0 and "HEAP_PROFILE_INUSE_INTERVAL" in proc.stderr


def test_heap_dumper_needs_tcmalloc_preloaded(tmp_path):
    with pytest.raises(EdgeprofError, match="preload"):
        HeapDumper().start(tmp_path)


@needs_tcmalloc
def test_preload_env_puts_the_full_tcmalloc_first_and_turns_dumps_off():
    env = tcmalloc.preload_env({"LD_PRELOAD": "/x/libfoo.so", "HEAPPROFILE": "/tmp/p",
                                "HEAP_PROFILE_ALLOCATION_INTERVAL": "5"})
    first, *rest = env["LD_PRELOAD"].split()
    assert Path(first).name == "libtcmalloc.so.4" and Path(first).is_file()
    assert rest == ["/x/libfoo.so"] and "HEAPPROFILE" not in env
    assert env["HEAP_PROFILE_ALLOCATION_INTERVAL"] == "0"
    assert env["HEAP_PROFILE_INUSE_INTERVAL"] == "0"


def test_parse_heap_profile_header_and_garbage(tmp_path):
    good = tmp_path / "a.heap"
    good.write_text("heap profile:      3:  4096 [    10:  81920] @ heapprofile\n"
                    "     3:  4096 [    10:  81920] @ 0x1 0x2\n\nMAPPED_LIBRARIES:\n")
    assert parse_heap_profile(good) == {"inuse_objects": 3, "inuse_bytes": 4096,
                                        "alloc_objects": 10, "alloc_bytes": 81920}
    bad = tmp_path / "b.heap"
    bad.write_text("not a profile\n")
    with pytest.raises(EdgeprofError, match="not a gperftools heap profile"):
        parse_heap_profile(bad)
