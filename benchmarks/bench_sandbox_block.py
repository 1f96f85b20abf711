"""Can runs share one sandbox boot without sharing state (issue 39)? The same cell run in
a fresh user-mode Linux boot each, and one after another in one boot, side by side.

A round runs, for each policy, ``--per-boot`` runs of the cell each in its own boot
(``run --backend uml``, the workflow's ``sandbox.per_boot: run``), then the same runs one
after another in one boot (``run-block``, its ``sandbox.per_boot: block``: the page cache
dropped and the swap device switched off and on before each run, so each starts from a
boot's state but for what the kernel keeps: slab, free-page order, the host's mappings of
guest memory). The rounds alternate which comes first. Printed per
policy and way: the median [range] of makespan, peak cgroup memory, peak swap and wall
time per run, and the paired ratio shared/fresh of each median with its bootstrap 95 % CI.

``--mixed L1 L2`` compares instead, for each policy, a block of ``--per-boot`` runs at
L1 and another at L2 ("apart") with one block of the same runs, L1 and L2 alternating
("mixed": the guest sized for both, each run under its own limit), per policy and limit.

Usage: python benchmarks/bench_sandbox_block.py --split S --pipeline P.json
           [--policies bulk linear] [--limit 48M|none | --mixed none 48M] [--rounds 5]
           [--per-boot 4]
(batch 1, as the workflow's default run)
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import alternate, print_ratios  # noqa: E402

from engine.analysis.tidy import tidy_run  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
METRICS = {"makespan_s": "makespan (s)", "peak_cg_current_bytes": "peak cgroup (MiB)",
           "peak_cg_swap_current_bytes": "peak swap (MiB)", "per_run_s": "wall a run (s)"}


def run_args(args: argparse.Namespace, policy: str, at: str | None = None) -> list[str]:
    at = at or args.limit
    limit = [] if at == "none" else ["--limit", at, "--swap", "max"]
    return ["--pipeline", str(args.pipeline.resolve()), "--policy", policy, "--split",
            str(args.split.resolve()), *limit, "--pin-cpu", "--batch", "1",
            "--sample-hz", "100", "--timeout", "600"]


def fresh(args: argparse.Namespace, policy: str, out: Path) -> list[dict]:
    """``--per-boot`` runs, a boot each."""
    rows = []
    for i in range(args.per_boot):
        folder = out / f"fresh-{policy.replace(':', '_')}-{i}"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "engine", "run", *run_args(args, policy),
                        "--backend", "uml", "--out", str(folder), "-q"], cwd=REPO, check=True)
        rows.append(_row(folder, time.perf_counter() - t0))
    return rows


def shared(args: argparse.Namespace, policy: str, out: Path,
           limits: list[str] | None = None, way: str = "shared") -> list[dict]:
    """``--per-boot`` runs one after another in one boot: ``run-block``, as the workflow
    runs the sandbox's blocks (the guest's state reset before each run); ``limits``: each
    run's, in turn (default ``--limit``'s alone), each row saying its limit."""
    limits = limits or [args.limit]
    ats = [limits[i % len(limits)] for i in range(args.per_boot * len(limits))]
    folders = [out / f"{way}-{policy.replace(':', '_')}-{at}-{i}" for i, at in enumerate(ats)]
    argv = [sys.executable, "-m", "engine", "run-block", "-q"]
    for at, folder in zip(ats, folders):
        argv += ["--run", shlex.join([*run_args(args, policy, at), "--backend", "uml",
                                      "--out", str(folder)])]
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=REPO, check=True)
    wall = time.perf_counter() - t0
    return [_row(folder, wall / len(folders)) | {"limit": at}
            for at, folder in zip(ats, folders)]


def apart(args: argparse.Namespace, policy: str, out: Path) -> list[dict]:
    """The runs of ``mixed``, a block for each limit."""
    return [row for at in args.mixed for row in shared(args, policy, out, [at], "apart")]


def mixed(args: argparse.Namespace, policy: str, out: Path) -> list[dict]:
    """``--per-boot`` runs at each of the ``--mixed`` limits in one boot, alternating."""
    return shared(args, policy, out, args.mixed, "mixed")


def _row(folder: Path, per_run_s: float) -> dict:
    row = tidy_run(folder)["runs"].iloc[0]
    if row["termination"] != "ok":
        raise SystemExit(f"{folder}: {row['termination']} ({row['termination_detail']})")
    return {"makespan_s": row["makespan_s"],
            "peak_cg_current_bytes": row["peak_cg_current_bytes"] / 2**20,
            "peak_cg_swap_current_bytes": row["peak_cg_swap_current_bytes"] / 2**20,
            "per_run_s": per_run_s}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", type=Path, required=True)
    ap.add_argument("--pipeline", type=Path, required=True)
    ap.add_argument("--policies", nargs="+", default=["bulk", "linear"])
    ap.add_argument("--limit", default="48M")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-boot", type=int, default=4)
    ap.add_argument("--mixed", nargs=2, metavar="LIMIT",
                    help="compare a block per limit with one block of both (e.g. none 48M)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        def folder(r: int) -> Path:
            out = Path(tmp) / f"round{r}"
            out.mkdir(exist_ok=True)
            return out

        if args.mixed:
            ways = {"apart": lambda r, policy: apart(args, policy, folder(r)),
                    "mixed": lambda r, policy: mixed(args, policy, folder(r))}
        else:
            ways = {"fresh": lambda r, policy: fresh(args, policy, folder(r)),
                    "shared": lambda r, policy: shared(args, policy, folder(r))}
        rows, loads = alternate(args.rounds, args.policies, ways)
    if args.mixed:
        by_limit: dict[tuple[str, str], list[dict]] = {}
        for (policy, way), found in rows.items():
            for row in found:
                by_limit.setdefault((f"{policy}@{row['limit']}", way), []).append(row)
        groups = [f"{p}@{at}" for p in args.policies for at in args.mixed]
        # a mixed boot's wall is its runs' of both limits: a way's, not a limit's
        print_ratios(f"{args.pipeline.stem}, {' and '.join(args.mixed)} (swap max), "
                     f"{args.rounds} rounds x {args.per_boot} runs a limit a way", by_limit,
                     loads, groups, {k: v for k, v in METRICS.items() if k != "per_run_s"},
                     "apart", "mixed")
        for way in ("apart", "mixed"):
            walls = [row["per_run_s"] for (_, w), found in rows.items() if w == way
                     for row in found]
            print(f"  wall a run, every limit and policy, {way}: median "
                  f"{statistics.median(walls):.3f} s [{min(walls):.3f}, {max(walls):.3f}]")
        return 0
    print_ratios(f"{args.pipeline.stem} at {args.limit} (swap max), {args.rounds} rounds x "
                 f"{args.per_boot} runs a way", rows, loads, args.policies, METRICS, "fresh",
                 "shared")
    return 0


if __name__ == "__main__":
    sys.exit(main())
