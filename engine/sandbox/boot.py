"""Booting the guest under qemu: one job script per boot, a wall-clock timeout, kill by PID.

The job is a shell script in a host folder shared read-write with the guest (the guest
sees it at /run/vmout); its exit code comes back in ``rc`` in that folder. The host's
root filesystem is shared read-only, so the guest runs the host's Python and project.
Swap is a sparse file on the host seen as a virtio disk (optionally throttled like an SD
card); it is deleted when the boot ends, however it ends.
"""

from __future__ import annotations

import errno
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import EdgeprofError
from engine.files import naming
from engine.limits.sandbox import QEMU
from engine.procs import preexec, stamped_tempdir, wait_exit
from engine.runner.outdir import SWAP_PREFIX
from engine.sandbox import hostmaps, uml
from engine.sandbox.guest import INSTALL_HINT, Guest
from engine.signals import signals_deferred

START_MARK = "VM_CMD_START"
# SD-card-like swap device: ~20 MB/s read, ~10 MB/s write, 1500 IOPS
SD_THROTTLE = ("throttling.bps-read=20971520,throttling.bps-write=10485760,"
               "throttling.iops-total=1500")
_ACCEL_CACHE: dict[str, tuple[str, str]] = {}


@dataclass
class BootResult:
    rc: int | None  # the job's exit code; None when it never finished
    accel: str
    boot_s: float | None  # host wall time from qemu start to the job's first instruction
    total_s: float
    timed_out: str | None  # "boot" | "job" | "maps" (UML at the host's mapping cap) | None
    qemu_exit: int | None
    console: str  # the whole serial console, each line host-timestamped
    error: str | None = None
    guest_marks: dict[str, float] = field(default_factory=dict)
    host_maps_peak: int | None = None  # UML: the most host mappings a guest process held


def qemu_binary() -> str:
    path = shutil.which(QEMU)
    if path is None:
        raise EdgeprofError(f"{QEMU} is not installed; the vm backend needs it: {INSTALL_HINT}")
    return path


def kvm_status(guest: Guest | None = None, probe: bool = True) -> tuple[str, str]:
    """("kvm", why) when a short probe boot proves KVM works, else ("tcg", why). /dev/kvm
    alone proves nothing: PVM's software KVM hangs a stock kernel."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg", "no usable /dev/kvm"
    if Path("/sys/module/kvm_pvm").exists():
        return "tcg", "/dev/kvm is PVM (kvm_pvm), which cannot run a stock kernel"
    cpuinfo = Path("/proc/cpuinfo").read_text()
    if not re.search(r"^flags\s*:.*\b(vmx|svm)\b", cpuinfo, re.M):
        return "tcg", "the CPU has no vmx/svm flag"
    if not probe or guest is None:
        return "tcg", "KVM not probed"
    key = f"{guest.kernel}:{guest.kernel_version}"
    if key not in _ACCEL_CACHE:
        with tempfile.TemporaryDirectory(prefix="edgeprof-kvmprobe.") as share:
            Path(share, "job.sh").write_text("exit 0\n")
            res = boot(guest, Path(share), accel="kvm", ram_mb=256, swap_bytes=0,
                       boot_timeout_s=20, timeout_s=30)
        _ACCEL_CACHE[key] = (("kvm", f"probe boot took {res.total_s:.1f} s") if res.rc == 0
                             else ("tcg", f"KVM probe boot failed ({res.error or res.rc})"))
    return _ACCEL_CACHE[key]


def qemu_argv(guest: Guest, share: Path, accel: str, ram_mb: int, smp: int,
              swap_image: Path | None, sd_card: bool) -> list[str]:
    """The qemu command line: the host's / read-only over 9p, the share read-write, swap
    as a virtio disk."""
    if accel == "kvm":
        accel_args = ["-accel", "kvm", "-cpu", "host"]
    else:  # -cpu max: numpy needs x86-64-v2; MTTCG scales over host cores
        accel_args = ["-accel", "tcg,thread=multi", "-cpu", "max"]
    # THP only on request, as on small devices: swapping a THP to a virtio disk splits it
    # and counts a memory.swap.events "fail" although swap.max was not reached
    append = (f"console=ttyS0 panic=-1 loglevel=4 transparent_hugepage=madvise "
              f"vm.cmd=job.sh vm.swap={'disk' if swap_image else 'none'}")
    argv = [qemu_binary(), "-machine", "q35", *accel_args, "-smp", str(smp),
            "-m", str(ram_mb), "-nodefaults", "-no-user-config", "-display", "none",
            "-serial", "stdio", "-no-reboot",
            "-kernel", str(guest.kernel), "-initrd", str(guest.initrd), "-append", append,
            "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,"
                       "multidevs=remap",
            "-virtfs", f"local,path={share.resolve()},mount_tag=vmout,security_model=none"]
    if swap_image is not None:
        drive = f"file={swap_image},if=virtio,format=raw,cache=none,aio=threads"
        argv += ["-drive", drive + ("," + SD_THROTTLE if sd_card else "")]
    return argv


def boot(guest: Guest | uml.Uml, share: Path, *, accel: str = "tcg", ram_mb: int = 1024,
         smp: int | None = None, swap_bytes: int = 0, sd_card: bool = False,
         boot_timeout_s: float = 120, timeout_s: float | None = None,
         on_line: Callable[[str], None] | None = None,
         stall_s: float | None = None, cpus: set[int] | None = None) -> BootResult:
    """Boot once, run ``share``/job.sh, power off: a qemu ``Guest``, or a user-mode Linux
    kernel (``uml.Uml``; ``accel`` "uml"). The machine's process group (qemu, or UML and
    the host processes it runs its guest's processes in) is killed on a timeout or any
    exception (KeyboardInterrupt included); the swap image is always removed. Under UML
    the host counts the guest processes' mappings (``hostmaps``) and ends a boot whose
    process sits at the host's cap for ``stall_s`` (default: hostmaps.DEFAULT_WINDOW_S).
    ``cpus``: the host CPUs the machine's processes may run on (its children inherit them)."""
    share = Path(share)
    (share / "rc").unlink(missing_ok=True)
    smp = smp or min(2, os.cpu_count() or 1)
    lines: list[str] = []
    marks: dict[str, float] = {}
    started = threading.Event()
    swap_dir = proc = reader = maps = None
    timed_out = error = None
    t0 = time.monotonic()
    try:
        if isinstance(guest, uml.Uml):
            uml.check_memory_file(ram_mb)
        swap_image = None
        if swap_bytes > 0:
            # beside the share, not in it: the guest must not see its own swap as a file;
            # created and named at once (a signal in between would orphan it)
            with signals_deferred():
                swap_dir = stamped_tempdir(SWAP_PREFIX, share.parent)
            swap_image = swap_dir / "swap.img"
            with naming(swap_image), open(swap_image, "wb") as f:
                f.truncate(swap_bytes)  # sparse; the guest runs mkswap at every boot
        if isinstance(guest, uml.Uml):
            argv, env = uml.boot_argv(guest.binary, share, ram_mb, swap_image), uml.environ()
        else:
            argv, env = qemu_argv(guest, share, accel, ram_mb, smp, swap_image, sd_card), None
        lines.append(f"[{0:9.3f}] host: {shlex.join(argv)}")  # the post-mortem starts here
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True, env=env,
                                # it never outlives its supervisor
                                preexec_fn=preexec(cpus and (lambda: os.sched_setaffinity(
                                    0, cpus))))

        def read() -> None:
            for raw in proc.stdout:
                line = raw.decode(errors="replace").rstrip("\r\n")
                now = time.monotonic() - t0
                lines.append(f"[{now:9.3f}] {line}")
                if START_MARK in line and "start" not in marks:
                    marks["start"] = now
                    started.set()
                m = re.match(r"EDGEPROF_VM\[([\d.]+)\] (\w+)", line)
                if m:
                    marks.setdefault(f"guest_{m.group(2)}", float(m.group(1)))
                if on_line is not None:
                    on_line(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        if isinstance(guest, uml.Uml):
            threading.Thread(target=lambda: lines.append(
                f"[{time.monotonic() - t0:9.3f}] {uml.allocate_ram_file(proc.pid)}"),
                daemon=True).start()
            maps = hostmaps.MapWatch(proc.pid, uml.max_map_count(), stall_s).start()
        # poll so a qemu that dies early is noticed at once, not after the boot timeout,
        # and a timeout shorter than the poll fires on time
        while (not started.wait(max(0.0, min(0.2, t0 + boot_timeout_s - time.monotonic())))
               and proc.poll() is None):
            if time.monotonic() - t0 > boot_timeout_s:
                timed_out = "boot"
                error = f"the guest did not start the job within {boot_timeout_s:g} s"
                break
        deadline = None if timeout_s is None else t0 + timeout_s
        while timed_out is None and proc.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if maps is not None and maps.hit.is_set():
                timed_out, error = "maps", maps.detail()
            elif left is not None and left <= 0:
                timed_out = "job"
                error = f"the guest job exceeded the {timeout_s:g} s timeout"
            else:
                try:
                    wait_exit(proc, 0.5 if left is None else min(0.5, left))
                except subprocess.TimeoutExpired:
                    pass
    finally:
        with signals_deferred():  # a second Ctrl-C must not leave the swap image behind
            maps_peak = maps.stop() if maps is not None else None  # a last look
            if proc is not None:
                _kill(proc)
            if reader is not None:
                reader.join(timeout=5)
            if swap_dir is not None:
                shutil.rmtree(swap_dir, ignore_errors=True)
    total = time.monotonic() - t0
    name = "uml" if isinstance(guest, uml.Uml) else "qemu"
    if proc is not None:
        lines.append(f"[{total:9.3f}] host: {name} (pid {proc.pid}) ended with "
                     f"{proc.returncode}{', killed: ' + error if timed_out else ''}")
    if proc is not None and proc.returncode == -signal.SIGXFSZ:  # not the guest's result
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG),
                      f"a file of the {name} process (killed by SIGXFSZ: over this shell's "
                      f"file-size limit, ulimit -f)")
    rc_file = share / "rc"
    rc = int(rc_file.read_text()) if rc_file.is_file() and timed_out is None else None
    if rc is None and error is None:
        fatal = [ln for ln in lines if "FATAL" in ln or "Kernel panic" in ln or
                 "qemu-system" in ln]
        error = (f"the guest stopped without finishing the job ({name} exit "
                 f"{proc.returncode}){': ' + fatal[0] if fatal else ''}")
    return BootResult(rc=rc, accel=accel, boot_s=marks.get("start"), total_s=total,
                      timed_out=timed_out, qemu_exit=proc.returncode,
                      console="\n".join(lines) + "\n", error=error, guest_marks=marks,
                      host_maps_peak=maps_peak)


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the machine's process group: the session we started it in (qemu alone, or
    UML and its host processes); nothing else is touched. Returns once the group is gone
    (UML's other processes are reaped by init, a moment after the kernel process)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)
