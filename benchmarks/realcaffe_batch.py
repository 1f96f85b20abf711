"""Memory against batch size, stage by stage: real Caffe 1.0 and both runtimes.

For each paper network and batch (default 1, 2, 4, 10) the probe's two sequences run in
fresh processes on each side, as ``python -m engine.realcaffe compare --batch N`` runs
them (real Caffe in the bullseye chroot on a deploy prototxt with that input batch; the
engine with ``--batch N``). Prints a markdown table (MiB above each process's start,
real Caffe / caffe runtime / lean runtime, and whether the caffe runtime is within 5 % or
4 MiB of real Caffe at every stage) and writes ``runtime_batch.png`` into --out (memory
against batch, one line per stage, a panel per network), with the commit and the load
average (docs/runtime.md, "Against batch size").

Usage: python benchmarks/realcaffe_batch.py [--batches 1 2 4 10] [--out docs/figures]
Needs root and the chroot (python -m engine.realcaffe build).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import zoo_split

from engine.caffe.splitter import Description
from engine.realcaffe import chroot, reference

PAPER = ["AgeNet", "GenderNet", "FaceNet", "SoS-AlexNet", "SoS-GoogleNet"]
# (label, mode, figure key): the stages compared, in the order a run meets them
STAGES = [("after INIT", "bulk", "init"), ("whole-file LOAD, peak", "bulk", "load_peak"),
          ("after the bulk forward pass", "bulk", "forward"),
          ("partial-by-partial LOADs, peak", "layers", "partials_peak"),
          ("after the last layer's reset", "layers", "last_reset")]
SIDES = ("real Caffe", "caffe runtime", "lean runtime")


def _figures(measured: reference.Measured, mode: str) -> dict[str, float]:
    fig = reference.figures(measured.stages, mode)
    if mode == "layers":
        fig["last_reset"] = fig["resets"][-1]
    return fig


def measure(split: Path, data: Path, batches: list[int], work: Path) -> dict:
    """(network, batch) -> side -> stage key -> MiB, and whether the caffe runtime is
    within 5 % or 4 MiB of real Caffe at every stage (``reference.mismatches``)."""
    out = {}
    for name in PAPER:
        path = next(p for p in split.glob("*.description.json")
                    if Description.load(p).network == name)
        for batch in batches:
            cell = work / f"{name}-{batch}"
            sides: dict[str, dict[str, float]] = {side: {} for side in SIDES}
            bad = []
            for mode in reference.MODES:
                real = _figures(reference.measure_caffe(path, mode, data, cell, batch=batch),
                                mode)
                runs = {rt: _figures(reference.measure_engine(path, mode, rt, cell,
                                                              batch=batch), mode)
                        for rt in ("caffe", "lean")}
                bad += reference.mismatches(real, runs["caffe"])
                for side, fig in zip(SIDES, (real, runs["caffe"], runs["lean"])):
                    sides[side] |= {k: v for k, v in fig.items() if not isinstance(v, list)}
            out[name, batch] = (sides, bad)
            print(f"{name} batch {batch}: {'ok' if not bad else '; '.join(bad)}",
                  file=sys.stderr)
    return out


def table(results: dict, batches: list[int]) -> str:
    lines = ["| network | batch | " + " | ".join(label for label, _, _ in STAGES)
             + " | within 5 % or 4 MiB |", "|---|---|" + "---|" * len(STAGES) + "---|"]
    for name in PAPER:
        for batch in batches:
            sides, bad = results[name, batch]
            cells = [" / ".join(f"{sides[s][key]:.1f}" for s in SIDES)
                     for _, _, key in STAGES]
            lines.append(f"| {name} | {batch} | " + " | ".join(cells)
                         + f" | {'yes' if not bad else 'NO: ' + '; '.join(bad)} |")
    return "\n".join(lines)


def figure(results: dict, batches: list[int], path: Path, stamp: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PAPER), figsize=(4 * len(PAPER), 4.2), sharex=True)
    for ax, name in zip(axes, PAPER):
        for (label, _, key), colour in zip(STAGES, plt.cm.tab10.colors):
            for side, style in (("real Caffe", "-"), ("caffe runtime", "--")):
                ax.plot(batches, [results[name, b][0][side][key] for b in batches], style,
                        color=colour, marker="o" if side == "real Caffe" else "x",
                        label=f"{label} ({side})")
        ax.set_title(name)
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.set_xlabel("batch (images per forward pass)")
        ax.set_ylabel("MiB above the process's start")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(STAGES), fontsize=8)
    fig.suptitle("Memory against batch, per stage: real Caffe 1.0 (solid, o) and the caffe "
                 f"runtime (dashed, x); {stamp}", fontsize=10)
    fig.tight_layout(rect=(0, 0.12, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 10])
    p.add_argument("--out", type=Path, default=Path("docs/figures"))
    args = p.parse_args()
    why = chroot.why_unavailable()
    if why:
        print(f"real Caffe unavailable: {why}", file=sys.stderr)
        return 2
    chroot.ensure_built()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="edgeprof-batch") as tmp:
        root = Path(tmp)
        split = zoo_split(PAPER, root / "data", seed=7)
        results = measure(split, root / "data", args.batches, root / "work")
    load_after = os.getloadavg()[0]
    stamp = f"commit {commit}, load {load:.1f} -> {load_after:.1f}"
    args.out.mkdir(parents=True, exist_ok=True)
    figure(results, args.batches, args.out / "runtime_batch.png", stamp)
    print(f"MiB above each process's start, real Caffe / caffe runtime / lean runtime; "
          f"{stamp}.\n\n{table(results, args.batches)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
