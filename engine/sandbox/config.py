"""A sandbox guest's settings (RAM, swap device, CPUs, accelerator, timeouts, UML's
ascending faults), each from the environment (``ENV_NAMES``): read by the vm and uml
backends (``engine.sandbox.run``), and, to check them and put those that change what a guest
measures into its runs' params, by the workflow when it plans, without importing the
backends' host side."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from engine.errors import EdgeprofError
from engine.units import MIB, parse_size

log = logging.getLogger(__name__)

_ENV_HELP = {"RAM": "a size such as 2G", "SWAP_DEVICE": "a size such as 2G",
             "SMP": "a CPU count > 0", "ACCEL": "auto, kvm or tcg",
             "BOOT_TIMEOUT": "finite seconds > 0", "TIMEOUT": "finite seconds > 0",
             "ASCEND": "1 (on, the default) or 0 (off)",
             "SD_CARD": "1 (on) or 0 (off, the default)"}
# Each setting's variable: EDGEPROF_SANDBOX_<NAME> for what both sandboxes read,
# EDGEPROF_UML_<NAME> for user-mode Linux's own, EDGEPROF_VM_<NAME> for the qemu guest's
# own (``--backend vm``: "vm" names the qemu guest alone)
ENV_NAMES = {"RAM": "EDGEPROF_SANDBOX_RAM", "SWAP_DEVICE": "EDGEPROF_SANDBOX_SWAP_DEVICE",
             "BOOT_TIMEOUT": "EDGEPROF_SANDBOX_BOOT_TIMEOUT",
             "TIMEOUT": "EDGEPROF_SANDBOX_TIMEOUT", "ASCEND": "EDGEPROF_UML_ASCEND",
             "SMP": "EDGEPROF_VM_SMP", "ACCEL": "EDGEPROF_VM_ACCEL",
             "SD_CARD": "EDGEPROF_VM_SD_CARD"}
# the old names of those renamed (EDGEPROF_VM_<NAME> for both sandboxes): read, with a
# warning, for one release
OLD_ENV_NAMES = {f"EDGEPROF_VM_{name}": new for name, new in ENV_NAMES.items()
                 if new != f"EDGEPROF_VM_{name}"}
# a switch's words: anything else is refused (a typo such as "off" once meant on)
_SWITCH = {"1": True, "0": False}
_SD_CARD = {**_SWITCH, "true": True, "yes": True, "false": False, "no": False}


# How UML traps its processes' system calls and faults (engine/sandbox/uml.py): seccomp, the
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


GUEST_OVERHEAD = 768 * MIB  # kernel, tmpfs root overlay, the supervisor's own Python+numpy
MIN_RAM = 1024 * MIB
# The guest of a command (engine.sandbox.run.run_command_in_sandbox) without a limit, whose
# need is not known: far above what any pipeline here holds (a Caffe-faithful 1.6 GB
# pipeline under DeepEye peaks at 1.7 GB); a run's is sized by its bound
BASELINE_RAM = 4096 * MIB
RAM_STEP = 64 * MIB


def default_ram(limit: int | None, bound: int | None) -> int:
    """The guest's RAM where EDGEPROF_SANDBOX_RAM does not set it, in whole ``RAM_STEP``:
    comfortably above the limit (the cgroup, not the guest, must constrain the run) and
    above ``bound``, what an unconstrained run may hold (a boot of limited and
    unconstrained runs has both), at least ``MIN_RAM``; neither known: ``BASELINE_RAM``."""
    if limit is None and bound is None:
        return BASELINE_RAM
    ram = max(MIN_RAM, *(need + GUEST_OVERHEAD for need in (limit, bound) if need is not None))
    return -(-ram // RAM_STEP) * RAM_STEP


@dataclass
class SandboxConfig:
    """Guest settings; each can be set from the environment (``ENV_NAMES``)."""

    ram: int | None = None  # guest RAM; default: ``default_ram``
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
            raise EdgeprofError(f"{ENV_NAMES['SD_CARD']}: the uml backend cannot throttle its "
                                "swap device; use --backend vm or unset it")

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> SandboxConfig:
        """Settings from the environment (``ENV_NAMES``, or an old name with a warning); a
        bad value is one error naming the variable."""
        env = dict(os.environ if env is None else env)
        cfg = cls()

        def get(name: str, parse: Callable[[str], object], check: str = "") -> object:
            var = ENV_NAMES[name]
            old = next((o for o, new in OLD_ENV_NAMES.items() if new == var), None)
            if old is not None and env.get(old):
                if env.get(var):
                    raise EdgeprofError(f"{old} and {var} are both set; {old} is the old name "
                                        f"of {var}: unset it")
                log.warning(f"warning: {old} is now {var}; {old} will be removed in the "
                            "next release")
                var = old
            text = env.get(var)
            if not text:
                return None
            try:
                value = parse(text)
            except (ValueError, EdgeprofError):
                value = None
            if value is None or (check == ">0" and not 0 < value < math.inf):
                raise EdgeprofError(f"{var}={text!r} is not valid "
                                    f"({_ENV_HELP[name]}); fix or unset it")
            return value

        cfg.ram = get("RAM", parse_size)
        cfg.swap_device = get("SWAP_DEVICE", parse_size) or cfg.swap_device
        sd_card = get("SD_CARD", _SD_CARD.get)  # "true"/"yes" as it always took
        cfg.sd_card = bool(sd_card) if sd_card is not None else cfg.sd_card
        cfg.smp = get("SMP", int, ">0")
        if cfg.smp is not None and cfg.smp > (os.cpu_count() or 1):
            raise EdgeprofError(f"{ENV_NAMES['SMP']}={cfg.smp} is more than this host's "
                                f"{os.cpu_count()} CPUs; lower or unset it")
        cfg.accel = get("ACCEL", lambda t: t if t in ("auto", "kvm", "tcg") else None) \
            or cfg.accel
        cfg.boot_timeout_s = get("BOOT_TIMEOUT", float, ">0") or cfg.boot_timeout_s
        cfg.timeout_s = get("TIMEOUT", float, ">0") or cfg.timeout_s
        ascend = get("ASCEND", _SWITCH.get)
        cfg.ascend = bool(ascend) if ascend is not None else cfg.ascend
        return cfg
