"""``python -m engine.realcaffe build`` (setup.sh) and ``compare DESCRIPTION...``: real
Caffe 1.0's resident set stage by stage beside the engine's runtimes."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from engine.caffe.splitter import Description
from engine.errors import EdgeprofError
from engine.realcaffe import chroot, reference
from engine.runtime import RUNTIMES

LABELS = {"init": "after INIT (Net construction)", "load_peak": "whole-file LOAD, peak",
          "load_end": "whole-file LOAD, end", "forward": "after the bulk forward pass",
          "partials_peak": "partial-by-partial LOADs, peak",
          "resets": "after each layer's forward + reset: largest difference from Caffe; last",
          "delete": "after deleting the net"}


def _compare(descriptions: list[str], data: Path) -> None:
    """A Markdown table: every compared figure of real Caffe and of both runtimes, MiB
    above the process's start, with the outputs' agreement."""
    print("| network | sequence | stage | real Caffe | caffe runtime | lean runtime |")
    print("|---|---|---|---|---|---|")
    for description in descriptions:
        name = Description.load(description).network
        with tempfile.TemporaryDirectory() as tmp:
            for mode in reference.MODES:
                real = reference.measure_caffe(description, mode, data, Path(tmp))
                ours = {rt: reference.measure_engine(description, mode, rt, Path(tmp))
                        for rt in RUNTIMES}
                ref = reference.figures(real.stages, mode)
                figs = {rt: reference.figures(m.stages, mode) for rt, m in ours.items()}
                for key, value in ref.items():
                    if isinstance(value, list):
                        cells = [f"{value[-1]:.1f}"]
                        for rt in ("caffe", "lean"):
                            worst = max(abs(a - b) for a, b in zip(figs[rt][key], value))
                            cells.append(f"{worst:.1f}; {figs[rt][key][-1]:.1f}")
                    else:
                        cells = [f"{value:.1f}"] + [f"{figs[rt][key]:.1f}"
                                                     for rt in ("caffe", "lean")]
                    print(f"| {name} | {mode} | {LABELS[key]} | " + " | ".join(cells) + " |")
                bad = reference.mismatches(ref, figs["caffe"])
                err = reference.relative_error(ours["caffe"].outputs, real.outputs)
                verdict = "all within 5 % or 4 MiB" if not bad else "OFF: " + "; ".join(bad)
                print(f"| {name} | {mode} | outputs: max relative error | | {err:.1e} | "
                      f"{reference.relative_error(ours['lean'].outputs, real.outputs):.1e}"
                      f" |\n| {name} | {mode} | caffe runtime against real Caffe | | "
                      f"{verdict} | |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.realcaffe")
    sub = parser.add_subparsers(dest="action", required=True)
    build = sub.add_parser("build", help="build the bullseye chroot with Caffe (cached)")
    build.add_argument("--force", action="store_true", help="rebuild even if cached")
    cmp = sub.add_parser("compare", help="real Caffe against the engine, stage by stage")
    cmp.add_argument("descriptions", nargs="+", help="<stem>.description.json files")
    cmp.add_argument("--data", required=True,
                     help="a folder holding the models and partials (bound read-only)")
    args = parser.parse_args(argv)
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    try:
        if args.action == "build":
            why = chroot.why_unavailable()
            if why:  # setup.sh goes on: the tests that need it skip with this reason
                log(f"real Caffe: not built: {why}")
                return 0
            root = chroot.ensure_built(log=log, force=args.force)
            print(root)
        else:
            chroot.ensure_built(log=log)
            _compare(args.descriptions, Path(args.data))
    except EdgeprofError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
