"""A sandbox guest's settings (RAM, swap device, CPUs, accelerator, timeouts, UML's
ascending faults), each from the environment (EDGEPROF_VM_<NAME>): read by the vm and uml
backends (``engine.vm.run``), and, to check them and put those that change what a guest
measures into its runs' params, by the workflow when it plans, without importing the
backends' host side."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from engine.errors import EdgeprofError
from engine.units import MIB, parse_size

_ENV_HELP = {"RAM": "a size such as 2G", "SWAP_DEVICE": "a size such as 2G",
             "SMP": "a CPU count > 0", "ACCEL": "auto, kvm or tcg",
             "BOOT_TIMEOUT": "finite seconds > 0", "TIMEOUT": "finite seconds > 0",
             "ASCEND": "1 (on, the default) or 0 (off)",
             "SD_CARD": "1 (on) or 0 (off, the default)"}
# a switch's words: anything else is refused (a typo such as "off" once meant on)
_SWITCH = {"1": True, "0": False}
_SD_CARD = {**_SWITCH, "true": True, "yes": True, "false": False, "no": False}


# How UML traps its processes' system calls and faults (engine/vm/uml.py): seccomp, the
# default, or UML's older, slower ptrace
USERSPACE_ENV = "EDGEPROF_UML_USERSPACE"
USERSPACE_MODES = ("seccomp", "ptrace")


def uml_userspace(env: Mapping[str, str] | None = None) -> str:
    """EDGEPROF_UML_USERSPACE's mode (unset or empty: seccomp); another value is an error
    naming it (any other word once meant seccomp, silently)."""
    text = (os.environ if env is None else env).get(USERSPACE_ENV) or USERSPACE_MODES[0]
    if text not in USERSPACE_MODES:
        raise EdgeprofError(f"{USERSPACE_ENV}={text!r} is not valid (seccomp, the default, "
                            f"or ptrace); fix or unset it")
    return text


@dataclass
class VmConfig:
    """Guest settings; each can be set from the environment (EDGEPROF_VM_<NAME>)."""

    ram: int | None = None  # guest RAM; default: limit + GUEST_OVERHEAD, >= 1 GiB
    swap_device: int = 2048 * MIB  # device size when swap is unlimited ("max")
    sd_card: bool = False  # throttle the swap device like an SD card
    smp: int | None = None
    accel: str = "auto"  # auto | kvm | tcg
    boot_timeout_s: float = 180.0
    timeout_s: float = 3600.0  # host wall clock for a job without its own --timeout
    # uml: faults kept ascending (the preload and the engine's reads); off only to
    # reproduce the stall at the host's mapping cap (docs/sandboxes.md)
    ascend: bool = True

    def refuse_unsupported(self, sandbox: str) -> None:
        """A setting ``sandbox`` ("uml" or "vm") cannot honour is an error naming it."""
        if sandbox == "uml" and self.sd_card:
            raise EdgeprofError("EDGEPROF_VM_SD_CARD: the uml backend cannot throttle its "
                                "swap device; use --backend vm or unset it")

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> VmConfig:
        """Settings from EDGEPROF_VM_*; a bad value is one error naming the variable."""
        env = dict(os.environ if env is None else env)
        cfg = cls()

        def get(name: str, parse: Callable[[str], object], check: str = "") -> object:
            text = env.get(f"EDGEPROF_VM_{name}")
            if not text:
                return None
            try:
                value = parse(text)
            except (ValueError, EdgeprofError):
                value = None
            if value is None or (check == ">0" and not 0 < value < math.inf):
                raise EdgeprofError(f"EDGEPROF_VM_{name}={text!r} is not valid "
                                    f"({_ENV_HELP[name]}); fix or unset it")
            return value

        cfg.ram = get("RAM", parse_size)
        cfg.swap_device = get("SWAP_DEVICE", parse_size) or cfg.swap_device
        sd_card = get("SD_CARD", _SD_CARD.get)  # "true"/"yes" as it always took
        cfg.sd_card = bool(sd_card) if sd_card is not None else cfg.sd_card
        cfg.smp = get("SMP", int, ">0")
        if cfg.smp is not None and cfg.smp > (os.cpu_count() or 1):
            raise EdgeprofError(f"EDGEPROF_VM_SMP={cfg.smp} is more than this host's "
                                f"{os.cpu_count()} CPUs; lower or unset it")
        cfg.accel = get("ACCEL", lambda t: t if t in ("auto", "kvm", "tcg") else None) \
            or cfg.accel
        cfg.boot_timeout_s = get("BOOT_TIMEOUT", float, ">0") or cfg.boot_timeout_s
        cfg.timeout_s = get("TIMEOUT", float, ">0") or cfg.timeout_s
        ascend = get("ASCEND", _SWITCH.get)
        cfg.ascend = bool(ascend) if ascend is not None else cfg.ascend
        return cfg
