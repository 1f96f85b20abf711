"""``python -m engine.realcaffe build`` (setup.sh) and ``compare DESCRIPTION...``: real
Caffe 1.0's resident set stage by stage beside the engine's runtimes."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from engine.caffe.splitter import Description
from engine.errors import EdgeprofError
from engine.procs import stamped_tempdir, sweep
from engine.realcaffe import chroot, reference
from engine.runtime import RUNTIMES
from engine.signals import Signalled, signals_unwind

WORK_PREFIX = "edgeprof-realcaffe."  # + owner pid: the work folders, in the temp folder


def _mib(x: float) -> str:
    return f"{x:.1f}"


def _work_folder() -> Path:
    """A fresh work folder in the temporary folder, named after this process: one that a
    compare stopped by SIGKILL left is removed here, by the next compare."""
    tmp = Path(tempfile.gettempdir())
    sweep(tmp, WORK_PREFIX)
    return stamped_tempdir(WORK_PREFIX, tmp)


def _compare(descriptions: list[str], data: Path, batch: int | None = None) -> None:
    """Markdown tables, MiB above each process's start: every compared figure of real
    Caffe (the probe, and pycaffe where it runs the same sequence) and of both runtimes;
    what the resets freed against ``layer_buffers``; the outputs' agreement; and for V1
    models the whole-file load's transient against that of a V2 twin of the file. Each
    network at ``batch`` (None: its deploy batch)."""
    import numpy as np

    from engine.network import Network
    from engine.runtime.caffe import layer_buffers
    from engine.runtime.protobuf import message_peak_bytes

    print("| network | stage | real Caffe | pycaffe | caffe runtime | lean runtime |")
    print("|---|---|---|---|---|---|")
    twins = []
    for description in descriptions:
        desc = Description.load(description)
        name = desc.network if batch is None else f"{desc.network} (batch {batch})"
        work = _work_folder()
        try:
            real = {m: reference.measure_caffe(description, m, data, work, batch=batch)
                    for m in reference.MODES}
            ours = {(m, rt): reference.measure_engine(description, m, rt, work, batch=batch)
                    for m in reference.MODES for rt in RUNTIMES}
            py = reference.measure_pycaffe(description, data, work, batch=batch)
            if desc.format == "V1":  # the twin in the work folder (bound at /out)
                twin = reference.v2_caffemodel(description, work / f"{desc.stem}.v2.caffemodel")
                v2 = reference.measure_caffe(description, "bulk", data, work, caffemodel=twin,
                                             batch=batch)
                twins.append((desc, real["bulk"], v2, message_peak_bytes(twin)))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        fig = {m: reference.figures(real[m].stages, m) for m in reference.MODES}
        eng = {k: reference.figures(v.stages, k[0]) for k, v in ours.items()}
        pyf = reference.pycaffe_figures(py.stages)
        rows = [("after INIT (`Net` constructed)", "bulk", "init", True),
                ("whole-file LOAD, peak", "bulk", "load_peak", True),
                ("whole-file LOAD, end", "bulk", "load_end", True),
                ("after the bulk forward pass", "bulk", "forward", True),
                ("after deleting the net", "bulk", "delete", True),
                ("partial-by-partial LOADs (each layer run and reset), peak", "layers",
                 "partials_peak", False)]
        for label, mode, key, with_py in rows:
            cells = [_mib(fig[mode][key]), _mib(pyf[key]) if with_py else "",
                     _mib(eng[mode, "caffe"][key]), _mib(eng[mode, "lean"][key])]
            print(f"| {name} | {label} | " + " | ".join(cells) + " |")
        resets = fig["layers"]["resets"]
        worst = {rt: max(abs(a - b) for a, b in zip(eng["layers", rt]["resets"], resets))
                 for rt in RUNTIMES}
        print(f"| {name} | after the last layer's reset (largest difference over the "
              f"layers) | {_mib(resets[-1])} | | {_mib(eng['layers', 'caffe']['resets'][-1])}"
              f" ({_mib(worst['caffe'])}) | {_mib(eng['layers', 'lean']['resets'][-1])} "
              f"({_mib(worst['lean'])}) |")
        freed = reference.reset_frees(real["layers"].stages)
        owned = {layer.index: sum(n * np.dtype(t).itemsize for n, t in layer_buffers(layer))
                 / 2**20 for layer in Network(desc, batch=batch).layers}
        off = max(abs(freed[i] - owned[i]) for i in owned)
        print(f"| {name} | freed by the {len(owned)} resets (`layer_buffers`: largest "
              f"difference per layer) | {_mib(sum(freed.values()))} | | "
              f"{_mib(sum(owned.values()))} ({off:.2f}) | |")
        err = {rt: max(reference.relative_error(ours[m, rt].outputs, real[m].outputs)
                       for m in reference.MODES) for rt in RUNTIMES}
        bad = [b for m in reference.MODES
               for b in reference.mismatches(fig[m], eng[m, "caffe"])]
        print(f"| {name} | outputs: largest relative error | | "
              f"{reference.relative_error(py.outputs, real['bulk'].outputs):.1e} | "
              f"{err['caffe']:.1e} | {err['lean']:.1e} |")
        print(f"| {name} | caffe runtime against real Caffe | | | "
              f"{'all within 5 % or 4 MiB' if not bad else 'OFF: ' + '; '.join(bad)} | |")
    if twins:
        print("\n| network | weights | whole-file LOAD above INIT: V1 file | its V2 twin "
              "| `message_peak_bytes`: V1 / V2 |\n|---|---|---|---|---|")
        for desc, v1, v2, predicted_v2 in twins:
            f1, f2 = (reference.figures(r.stages, "bulk") for r in (v1, v2))
            predicted_v1 = message_peak_bytes(desc.resolve(desc.caffemodel))
            print(f"| {desc.network} | {_mib(desc.param_bytes / 2**20)} | "
                  f"{_mib(f1['load_peak'] - f1['init'])} | {_mib(f2['load_peak'] - f2['init'])}"
                  f" | {_mib(predicted_v1 / 2**20)} / {_mib(predicted_v2 / 2**20)} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.realcaffe")
    sub = parser.add_subparsers(dest="action", required=True)
    build = sub.add_parser("build", help="build the bullseye chroot with Caffe (cached)")
    build.add_argument("--force", action="store_true", help="rebuild even if cached")
    cmp = sub.add_parser("compare", help="real Caffe against the engine, stage by stage")
    cmp.add_argument("descriptions", nargs="+", help="<stem>.description.json files")
    cmp.add_argument("--data", required=True,
                     help="a folder holding the models and partials (bound read-only; "
                          "nothing is written there)")
    cmp.add_argument("--batch", type=int,
                     help="every network at this batch, as a deploy prototxt with that "
                          "input batch (default: each network's deploy batch)")
    args = parser.parse_args(argv)
    if args.action == "compare" and args.batch is not None and args.batch < 1:
        print(f"error: --batch {args.batch}: must be at least 1", file=sys.stderr)
        return 2
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
            with signals_unwind():  # SIGTERM and SIGHUP remove the work folder too
                _compare(args.descriptions, Path(args.data), args.batch)
    except EdgeprofError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Signalled as exc:  # the work folder is gone (its finally), the probe killed
        print(f"error: interrupted by {exc.name}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
