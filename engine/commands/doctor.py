"""``python -m engine doctor``: is this machine quiet enough to measure?"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="is this machine quiet enough to measure? (load, CPU "
                       "frequency, hugepages, swap; with --tables, a finished campaign's "
                       "noise floor and load)")
    p.add_argument("--tables", help="a campaign's aggregate tables (results/tables)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from engine.analysis.noise import host_checks, table_warnings

    tables = table_warnings(args.tables, required=True) if args.tables else []
    worst = 0
    for what, fine, meaning in host_checks():
        label = {True: "ok  ", False: "WARN", None: "note"}[fine]
        print(f"{label} {what}" + (f": {meaning}" if fine is False else ""))
        worst = worst or (1 if fine is False else 0)
    for warning in tables:
        print(f"WARN {warning}")
        worst = 1
    print("quiet enough to measure" if not worst else
          "not quiet: timing results would say more about this machine than the policies")
    return worst
