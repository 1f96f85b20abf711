"""``python -m engine graph``: draw a policy's task graph (DOT, or SVG with Graphviz)."""

from __future__ import annotations

import argparse
import logging

from engine.commands.options import not_over_inputs, output_file, positive
from engine.errors import EdgeprofError
from engine.files import write_text_atomic

log = logging.getLogger(__name__)

# Far above any graph one reads, low enough that a typo is refused at once (in --help)
MAX_GRAPH_INSTANCES = 1_000


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("graph", help="draw a policy's task graph (DOT, or SVG with Graphviz)")
    p.add_argument("--policy", required=True)
    p.add_argument("--description", required=True, help="<stem>.description.json")
    p.add_argument("--count", type=int, default=1,
                   help=f"instances of the network, 1 to {MAX_GRAPH_INSTANCES:,} (default 1)")
    p.add_argument("--out", required=True, help="output .dot or .svg")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> None:
    import shutil
    import subprocess

    from engine.caffe.splitter import Description
    from engine.schedule.dot import to_dot
    from engine.schedule.policies import parse_policy
    from engine.schedule.tasks import Instance

    policy = parse_policy(args.policy)
    positive(args.count, "--count", most=MAX_GRAPH_INSTANCES)
    out = output_file(args.out, "--out")
    if out.suffix not in (".dot", ".gv", ".svg"):
        raise EdgeprofError(f"--out {out}: graph writes DOT (.dot, .gv) or SVG (.svg); "
                            f"name the file so")
    desc = Description.load_checked(args.description, files=False)
    not_over_inputs(out, "--out", [desc.path], "the description")
    instances = [Instance(i, desc.network, 0, len(desc.layers), desc.num_conv_layers)
                 for i in range(args.count)]
    graph = policy.build(instances)
    names = {(i.id, layer.index): layer.name for i in instances for layer in desc.layers}
    dot = to_dot(graph, f"{policy.name}: {args.count} x {desc.network}",
                 {i.id: i.network for i in instances}, names)
    if out.suffix == ".svg":
        if shutil.which("dot") is None:
            raise EdgeprofError("writing SVG needs Graphviz's 'dot' (apt-get install graphviz); "
                                "or write .dot instead")
        svg = subprocess.run(["dot", "-Tsvg"], input=dot, capture_output=True, text=True,
                             check=True).stdout
        write_text_atomic(out, svg)
    else:
        write_text_atomic(out, dot)
    log.info(f"{len(graph.tasks)} tasks, {len(graph.edges())} edges -> {out}")
