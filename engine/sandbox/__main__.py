"""``python -m engine.sandbox build [--sandbox vm|uml] [--cache DIR]`` (setup.sh: both; the
Snakemake rule: the qemu guest): the qemu guest and the user-mode Linux kernel;
``check``: what each sandbox can do here."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.errors import EdgeprofError
from engine.sandbox import boot, guest, uml


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.sandbox")
    parser.add_argument("action", choices=["build", "check"])
    parser.add_argument("--cache", help=f"guest cache folder (default: ${guest.CACHE_ENV} "
                        "or ~/.cache/edgeprof/vm)")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument("--sandbox", choices=["all", "vm", "uml"], default="all",
                        help="build only this sandbox's kernel (default: both)")
    args = parser.parse_args(argv)
    cache = Path(args.cache) if args.cache else guest.default_cache()
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    try:
        if args.action == "build":
            if args.sandbox in ("all", "vm"):
                g = guest.ensure_guest(cache, log=log, force=args.force)
                print(f"vm: {g.kernel_version}: {g.kernel} {g.initrd}")
            if args.sandbox in ("all", "uml"):
                try:
                    u = uml.ensure_uml(log=log, force=args.force)
                    print(f"uml: {u.kernel_version} ({u.suite}): {u.binary}")
                except EdgeprofError as exc:
                    if args.sandbox == "uml":
                        raise
                    # a host where no UML kernel works keeps the vm backend
                    print(f"uml: unavailable here ({exc}); the vm backend stays",
                          file=sys.stderr)
        else:
            qemu = boot.qemu_binary()
            g = guest.load_guest(cache)
            accel, why = boot.kvm_status(g)
            u = uml.load_uml()
            print(f"qemu: {qemu}\nguest: {g.kernel_version if g else 'not built'} ({cache})"
                  f"\naccelerator: {accel} ({why})\numl: "
                  + (f"Linux {u.kernel_version} ({u.suite}) {u.binary}" if u
                     else uml.why_none() or "not built"))
    except EdgeprofError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
