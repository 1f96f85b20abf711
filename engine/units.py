"""Memory sizes as users write them (512M, 1G, 1.5GiB, 300000000)."""

from __future__ import annotations

import math
import os
import re

from engine.errors import EdgeprofError

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
MIB = 2**20
# Bytes of a page on this machine, the unit of the kernel's swap and fault counters
# (pswpin, pswpout, memory.stat's): 4 KiB on x86-64, 16 or 64 KiB on some ARM boards. A
# run records it (meta.json: host.page_size, and the guest's under vm.guest), so its
# counters convert with the page size of the machine that counted them.
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def parse_size(text: str) -> int:
    """Bytes in ``text``; K/M/G/T are binary (as cgroups and EdgeCaffe's limits use them)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise EdgeprofError(f"'{text}' is not a memory size (examples: 512M, 1G, 1.5G, 268435456)")
    value = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if not math.isfinite(value):
        raise EdgeprofError(f"memory size '{text:.40}' is too large")
    if value < 1:
        raise EdgeprofError(f"memory size '{text}' must be at least one byte")
    return int(value)


def format_size(nbytes: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if nbytes >= _UNITS[unit] and nbytes % _UNITS[unit] == 0:
            return f"{nbytes // _UNITS[unit]}{unit}"
    return str(nbytes)


def format_swap(swap_bytes: int | None) -> str:
    """The swap a run was allowed, as --swap takes it: ``max`` (None: unlimited) or a size
    (``0`` for none)."""
    return "max" if swap_bytes is None else format_size(swap_bytes)


def parse_swap(label: str) -> int | None:
    """The swap a ``format_swap`` label allows: None for ``max``, bytes otherwise."""
    return None if label == "max" else 0 if label == "0" else parse_size(label)
