"""What a swap device costs per page: named profiles with their sources, a number, a
profile the sandbox's runs measured, or a file ``python -m engine calibrate`` wrote.

A profile's costs are seconds per 4 KiB page swapped in and out. Where the source states
a device's minimum random 4 KiB IOPS (a class minimum), the cost is its inverse: an upper
bound for a device of that class. Swap-in of a page is a synchronous read at queue depth 1
(a fault waits for it); swap-out is written back in batches, so a datasheet's
queue-depth-1 write figure is pessimistic for it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from engine.errors import EdgeprofError
from engine.model.params import Model, SwapCost


@dataclass(frozen=True)
class Device:
    name: str
    per_page_in_s: float
    per_page_out_s: float
    source: str
    # the page its costs are per: 4 KiB for the profiles (their sources' 4 KiB I/O) and
    # a time given per page; the counters' for a calibrated or sandbox-measured device
    page_bytes: int = 4096

    def swap_cost(self) -> SwapCost:
        """As the simulator takes it: a major fault beyond the pages swapped in (a file
        page read again) costs a page read."""
        return SwapCost(self.per_page_in_s, self.per_page_out_s, self.per_page_in_s, 0,
                        self.source, self.page_bytes)


PROFILES = {d.name: d for d in (
    Device("zram-rpi4", 9.4e-6, 9.4e-6,
           "zram (lz4, page-cluster 0) on a Raspberry Pi 4 (2 GB): fio's mean latency per "
           "4 KiB I/O, 9.4 us (notes.xeome.dev/notes/Zram, 'Zram Performance Analysis'); "
           "one figure for reads and writes"),
    Device("nvme", 1 / 14_000, 1 / 50_000,
           "Samsung SSD 960 EVO data sheet: 4 KB random read at queue depth 1 ~14K IOPS "
           "(71 us), random write at QD1 ~50K IOPS (20 us)"),
    Device("sd-a2", 1 / 4000, 1 / 2000,
           "SD Association, Application Performance Class 2 (SD 6.0): at least 4000 random "
           "read and 2000 random write IOPS of 4 KiB: at most 250 us in, 500 us out"),
    Device("sd-a1", 1 / 1500, 1 / 500,
           "SD Association, Application Performance Class 1 (SD 5.1): at least 1500 random "
           "read and 500 random write IOPS of 4 KiB: at most 667 us in, 2 ms out"),
)}

_NUMBER = re.compile(r"(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)\s*(s|ms|us|µs|ns)?")
MAX_PAGE_COST_S = 1.0  # per 4 KiB page; the swap-cost figure ends at 10 ms
_SCALE = {None: 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_swap_cost(text: str, model: Model | None = None) -> Device:
    """``--swap-cost``: a profile name (``PROFILES``), a sandbox whose runs the model
    measured (``vm``, ``uml``: its fitted costs, emulation included), a file written by
    ``python -m engine calibrate``, or seconds per page for both directions (``50us``,
    ``0.2ms``, ``1e-4``). EdgeprofError naming the choices otherwise."""
    if text in PROFILES:
        return PROFILES[text]
    if model is not None:
        for m in model.modes.values():
            if m.mode == text and m.mode != "native" and m.swap is not None:
                if m.swap.per_page_in_s is None or m.swap.per_page_out_s is None:
                    raise EdgeprofError(f"--swap-cost {text}: the {text} model's cost per "
                                        f"page is unknown ({m.swap.unknown_why}); give a "
                                        f"profile ({', '.join(PROFILES)}) or a time per page")
                return Device(text, m.swap.per_page_in_s, m.swap.per_page_out_s,
                              f"measured in the {text} sandbox ({m.swap.n} task windows; "
                              f"its emulation's costs, not a device's)", m.swap.page_bytes)
    path = Path(text)
    if path.suffix == ".json" and path.is_file():
        return read_device(path)
    match = _NUMBER.fullmatch(text.strip())
    if match and not float(match.group(1)) > 0:
        raise EdgeprofError(f"--swap-cost {text}: a time per page must be above 0")
    if match:
        seconds = float(match.group(1)) * _SCALE[match.group(2)]
        if not seconds <= MAX_PAGE_COST_S:
            raise EdgeprofError(f"--swap-cost {text}: more than {MAX_PAGE_COST_S:g} s per "
                                f"page is no device (the slowest SD card takes ~10 ms)")
        return Device(text, seconds, seconds, f"given: {text} per page in and out")
    raise EdgeprofError(f"--swap-cost {text!r} is not a profile ({', '.join(PROFILES)}), a "
                        f"sandbox the model measured, a calibrate file (.json) or a time per "
                        f"page (e.g. 50us, 0.2ms)")


def read_device(path: str | Path) -> Device:
    """A device file written by ``python -m engine calibrate``."""
    try:
        data = json.loads(Path(path).read_text())
        device = Device(str(data["name"]), float(data["per_page_in_s"]),
                        float(data["per_page_out_s"]), str(data["source"]),
                        int(data.get("page_bytes", 4096)))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EdgeprofError(f"{path} is not a device file of python -m engine calibrate "
                            f"({exc}); run calibrate again") from None
    if not (0 <= device.per_page_in_s <= MAX_PAGE_COST_S
            and 0 <= device.per_page_out_s <= MAX_PAGE_COST_S and device.page_bytes > 0):
        raise EdgeprofError(f"{path}: per-page costs outside 0 to {MAX_PAGE_COST_S:g} s; run "
                            f"calibrate again")
    return device
