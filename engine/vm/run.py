"""Host side of the vm backend: size the guest, boot it, collect the run folder.

``run_in_vm`` is ``python -m engine run --backend vm``: the guest runs the same command
with ``--backend cgroup2`` under its own cgroup root and writes the run folder into the
writable share, a hidden folder beside ``--out``; the host adds the VM facts to meta.json
(accelerator, guest kernel, guest RAM, swap device, ``emulated``) and renames the folder
into place. A guest that fails to come up still yields a run folder: termination
``error``, with the console log in it. An interrupted run leaves nothing behind.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.errors import EdgeprofError
from engine.units import parse_size
from engine.vm import boot as vmboot
from engine.vm.guest import Guest, ensure_guest
from engine.vm.vmstat import GUEST_ENV, in_guest

MiB = 2**20
GUEST_OVERHEAD = 768 * MiB  # kernel, tmpfs root overlay, the supervisor's own Python+numpy
GUEST_RESERVE = 256 * MiB  # the least the guest needs beside the run's cgroup
DEVICE_SLACK = 64 * MiB  # swap device a bit larger than memory.swap.max: the cgroup limits
GUEST_OUT = "/run/vmout/run"  # --out as the guest sees it (inside the share)


@dataclass
class VmConfig:
    """Guest settings; each can be set from the environment (EDGEPROF_VM_<NAME>)."""

    ram: int | None = None  # guest RAM; default: limit + GUEST_OVERHEAD, >= 1 GiB
    swap_device: int = 2048 * MiB  # device size when swap is unlimited ("max")
    sd_card: bool = False  # throttle the swap device like an SD card
    smp: int | None = None
    accel: str = "auto"  # auto | kvm | tcg
    boot_timeout_s: float = 180.0
    timeout_s: float = 3600.0  # host wall clock for a job without its own --timeout

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> VmConfig:
        env = dict(os.environ if env is None else env)
        cfg = cls()
        get = lambda name: env.get(f"EDGEPROF_VM_{name}")  # noqa: E731
        if get("RAM"):
            cfg.ram = parse_size(get("RAM"))
        if get("SWAP_DEVICE"):
            cfg.swap_device = parse_size(get("SWAP_DEVICE"))
        cfg.sd_card = get("SD_CARD") in ("1", "true", "yes")
        if get("SMP"):
            cfg.smp = int(get("SMP"))
        cfg.accel = get("ACCEL") or cfg.accel
        if get("BOOT_TIMEOUT"):
            cfg.boot_timeout_s = float(get("BOOT_TIMEOUT"))
        if get("TIMEOUT"):
            cfg.timeout_s = float(get("TIMEOUT"))
        return cfg


@dataclass
class Plan:
    ram_bytes: int
    swap_device_bytes: int  # 0: no swap device
    accel: str
    accel_reason: str
    sd_card: bool = False


def _host_ram() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def plan(cfg: VmConfig, limit: int | None, swap: int | None, guest: Guest) -> Plan:
    """Guest RAM comfortably above the limit (the cgroup, not the guest, must constrain the
    run) and a swap device large enough that memory.swap.max is what limits swap."""
    if cfg.ram is not None:
        ram = cfg.ram
        if limit is not None and limit + GUEST_RESERVE > ram:
            raise EdgeprofError(
                f"vm: the limit ({limit // MiB} MiB) is above the guest RAM minus what the "
                f"guest itself needs ({ram // MiB} - {GUEST_RESERVE // MiB} MiB): raise "
                f"EDGEPROF_VM_RAM to at least {(limit + GUEST_OVERHEAD) // MiB}M or unset it")
    else:
        ram = max(1024 * MiB, (limit or 1024 * MiB) + GUEST_OVERHEAD)
    ram = -(-ram // (64 * MiB)) * 64 * MiB
    host = _host_ram()
    if host and ram > host:
        raise EdgeprofError(f"vm: the guest would need {ram // MiB} MiB of RAM for this limit "
                            f"but the host has {host // MiB} MiB; lower --limit")
    device = 0 if swap == 0 else cfg.swap_device if swap is None else swap + DEVICE_SLACK
    if cfg.accel in ("kvm", "tcg"):
        accel, why = cfg.accel, "set by EDGEPROF_VM_ACCEL"
    elif cfg.accel == "auto":
        accel, why = vmboot.kvm_status(guest)
    else:
        raise EdgeprofError(f"EDGEPROF_VM_ACCEL={cfg.accel!r}: use auto, kvm or tcg")
    return Plan(ram, device, accel, why, cfg.sd_card and device > 0)


def job_script(py_args: list[str], accel: str, cwd: Path) -> str:
    """The job for /run/vmout/job.sh: the guest's environment is empty (env -i)."""
    # EDGEPROF_CGROUP_ROOT comes from init.sh, which creates that cgroup
    env = {"PYTHONDONTWRITEBYTECODE": "1", GUEST_ENV: "1", "HOME": "/root",
           "TMPDIR": "/run/scratch"}
    if accel == "tcg":
        # OpenBLAS picks "Katmai" under -cpu max, and its AVX2/FMA kernels crawl under TCG
        env["OPENBLAS_CORETYPE"] = "Nehalem"
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    # job output goes to a file: the emulated serial console is slow
    return (f"{exports}cd {shlex.quote(str(cwd))} || exit 97\n"
            f"{shlex.join([sys.executable, '-m', 'engine.vm.job', *py_args])} "
            f"> /run/vmout/job.log 2>&1\n"
            f"rc=$?\ntail -n 20 /run/vmout/job.log\nexit $rc\n")


class _Signalled(BaseException):
    pass


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt already; SIGTERM must unwind too, so the finally
    blocks kill qemu and remove the guest's files."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise _Signalled(signal.Signals(signum).name)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def boot_job(py_args: list[str], share: Path, limit: int | None, swap: int | None,
             cfg: VmConfig | None = None, timeout_s: float | None = None,
             log: Callable[[str], None] | None = None,
             ) -> tuple[vmboot.BootResult, Plan, Guest, dict | None]:
    """Boot once running ``python -m engine.vm.job PY_ARGS`` with ``share`` as /run/vmout.
    Returns the boot result, the plan, the guest and the guest's guest.json (or None)."""
    cfg = cfg or VmConfig.from_env()
    vmboot.qemu_binary()
    guest = ensure_guest(log=log or (lambda m: print(m, file=sys.stderr)))
    p = plan(cfg, limit, swap, guest)
    (share / "job.sh").write_text(job_script(py_args, p.accel, Path.cwd()))
    res = vmboot.boot(guest, share, accel=p.accel, ram_mb=p.ram_bytes // MiB, smp=cfg.smp,
                      swap_bytes=p.swap_device_bytes, sd_card=p.sd_card,
                      boot_timeout_s=cfg.boot_timeout_s, timeout_s=timeout_s or cfg.timeout_s)
    facts_file = share / "guest.json"
    facts = json.loads(facts_file.read_text()) if facts_file.is_file() else None
    return res, p, guest, facts


def run_command_in_vm(argv: list[str], limit: int | None, swap: int | None,
                      cfg: VmConfig | None = None, timeout_s: float | None = None,
                      workdir: Path | None = None) -> dict:
    """ARGV in the guest under a cgroup2 session with memory.max=limit and memory.swap.max=
    swap (None: no limit). Returns {"guest": guest.json, "boot": boot facts, "vm": the
    meta.json "vm" facts, "job_log", "console"}. Nothing is left behind."""
    share = Path(tempfile.mkdtemp(prefix=".edgeprof-vm.", dir=workdir))
    try:
        with _sigterm_unwinds():
            res, p, guest, facts = boot_job(
                ["command", "max" if limit is None else str(limit),
                 "max" if swap is None else str(swap), *argv],
                share, limit, swap, cfg, timeout_s)
        log = share / "job.log"
        boot_facts = asdict(res)
        boot_facts.pop("console")
        return {"guest": facts, "boot": boot_facts, "vm": vm_facts(res, p, guest, facts),
                "job_log": log.read_text() if log.is_file() else "", "console": res.console}
    finally:
        shutil.rmtree(share, ignore_errors=True)


def vm_facts(res: vmboot.BootResult, p: Plan, guest: Guest, facts: dict | None) -> dict:
    """What meta.json records under "vm"."""
    facts = facts or {}
    start = facts.get("job_start_uptime_s")
    cmd_start = res.guest_marks.get("guest_VM_CMD_START")
    job_start = (None if None in (start, cmd_start, res.boot_s)
                 else res.boot_s + start - cmd_start)  # guest clock -> host seconds
    return {"accelerator": p.accel, "accelerator_reason": p.accel_reason,
            "emulated": p.accel == "tcg",
            "guest_kernel": facts.get("kernel", guest.kernel_version),
            "kernel_package": guest.package,
            "guest_ram_bytes": p.ram_bytes,
            "guest_mem_total_bytes": facts.get("MemTotal"),
            "swap_device": {"size_bytes": p.swap_device_bytes,
                            "device": "virtio-blk /dev/vda (sparse file on the host)"
                            if p.swap_device_bytes else None,
                            "sd_card_throttle": vmboot.SD_THROTTLE if p.sd_card else None},
            "boot_s": res.boot_s, "job_start_s": job_start, "vm_total_s": res.total_s,
            "guest_job_s": facts.get("job_s"), "vmstat_delta": facts.get("vmstat_delta"),
            "error": res.error}


def engine_args(args: argparse.Namespace) -> list[str]:
    """The ``engine run`` words to repeat in the guest (absolute paths: the guest sees the
    host's root at the same place; --out is in the share)."""
    a = ["--pipeline", str(Path(args.pipeline).resolve()), "--policy", args.policy,
         "--models", str(Path(args.models).resolve()), "--out", GUEST_OUT,
         "--blas-threads", str(args.blas_threads), "--seed", str(args.seed),
         "--sample-hz", str(args.sample_hz)]
    for flag, value in (("--limit", args.limit), ("--swap", args.swap),
                        ("--budget", args.budget), ("--batch", args.batch),
                        ("--timeout", args.timeout)):
        if value is not None:
            a += [flag, str(value)]
    if args.estimates:
        a += ["--estimates", str(Path(args.estimates).resolve())]
    for flag in ("heap_profile", "cpu_profile", "sample_uss", "no_probes"):
        if getattr(args, flag):
            a.append("--" + flag.replace("_", "-"))
    return a


def _check_inputs(args: argparse.Namespace) -> None:
    """Bad input fails here in a second, not after a guest boot."""
    from engine.runner.execute import model_index, resolve_descriptions
    from engine.schedule.pipelines import load_pipeline
    from engine.schedule.policies import parse_policy

    parse_policy(args.policy)
    resolve_descriptions(load_pipeline(args.pipeline), model_index(args.models))


def auto_chooses_vm(limit: int | None, swap: int | None) -> tuple[bool, dict]:
    """Whether ``--backend auto`` should run in the VM: a limit was asked for, nothing on
    this host can enforce it, qemu is installed, and this is not the guest already.
    Returns the decision and auto's notes on what it skipped (for meta.json)."""
    from engine.limits import LimitRequest
    from engine.limits.cgroupfs import ROOT_ENV
    from engine.limits.select import open_backend

    if (limit is None or in_guest() or os.environ.get(ROOT_ENV)
            or shutil.which(vmboot.QEMU) is None):
        return False, {}
    # without a designated cgroup root, opening auto's session writes nothing
    session = open_backend("auto", LimitRequest(limit, swap), f"probe-{os.getpid()}",
                           allow_unenforced=True)
    try:
        return not session.enforced, dict(session.notes.get("auto", {}))
    finally:
        session.close()


def run_in_vm(args: argparse.Namespace, limit: int | None, swap: int | None,
              cfg: VmConfig | None = None, auto: dict | None = None) -> dict:
    """``engine run`` with ``--backend vm`` (``args`` as engine.cli parses them); returns
    the written meta.json. ``auto``: auto's notes when it chose the VM. Raises
    engine.runner.execute.Interrupted on SIGINT/SIGTERM, after killing qemu and removing
    every file the run made."""
    from engine.runner.execute import Interrupted
    from engine.runner.supervise import refuse_existing

    out = Path(args.out)
    refuse_existing(out, args.force)
    _check_inputs(args)
    out.parent.mkdir(parents=True, exist_ok=True)
    share = Path(tempfile.mkdtemp(prefix=f".{out.name}.vm.", dir=out.parent))
    try:
        with _sigterm_unwinds():
            host_timeout = None if args.timeout is None else args.timeout * 1.5 + 300
            res, p, guest, facts = boot_job(["engine", *engine_args(args)], share, limit,
                                            swap, cfg, host_timeout)
            run = share / "run"
            if (run / "meta.json").is_file():
                meta = json.loads((run / "meta.json").read_text())
            else:  # the guest never finished: keep what it wrote, and the console
                run = _salvage(share)
                meta = _error_meta(args, limit, swap, res, run)
            _add_vm_facts(meta, vm_facts(res, p, guest, facts))
            if auto is not None:
                meta["limits"]["auto"] = auto | {"chosen": "vm"}
            (run / "console.log").write_text(res.console)
            if (share / "job.log").is_file():
                shutil.copyfile(share / "job.log", run / "guest_job.log")
            (run / "meta.json").write_text(json.dumps(meta, indent=1))
            if out.exists():
                shutil.rmtree(out)
            os.replace(run, out)
            return meta
    except (KeyboardInterrupt, _Signalled) as exc:
        name = "SIGINT" if isinstance(exc, KeyboardInterrupt) else str(exc)
        raise Interrupted(f"run interrupted by {name}; nothing written") from None
    finally:
        shutil.rmtree(share, ignore_errors=True)


def _add_vm_facts(meta: dict, vm: dict) -> None:
    """The guest's meta.json describes the guest as its host; the real host goes to
    "host", the guest and the VM to "vm"."""
    vm["guest"] = meta.pop("host", None)
    meta["vm"] = vm
    meta["host"] = {"kernel": platform.release(), "machine": platform.machine(),
                    "cpus": os.cpu_count(), "python": sys.version.split()[0]}
    limits = meta.setdefault("limits", {})
    limits["guest_backend"] = limits.get("backend")
    limits["backend"] = meta["backend"] = "vm"
    meta["emulated"] = vm["emulated"]


def _salvage(share: Path) -> Path:
    """The inner run's unfinished temp folder (its progress so far), else an empty one."""
    partial = sorted(share.glob(f".{Path(GUEST_OUT).name}.*"))
    run = share / "run"
    if partial:
        os.replace(partial[-1], run)
    else:
        run.mkdir(exist_ok=True)
    return run


def _error_meta(args: argparse.Namespace, limit: int | None, swap: int | None,
                res: vmboot.BootResult, run: Path) -> dict:
    from engine.runner.folder import assemble

    termination = "timeout" if res.timed_out == "job" else "error"
    detail = res.error or f"the guest job ended with code {res.rc} and wrote no run folder"
    meta = {"pipeline": {"path": str(args.pipeline)}, "policy": args.policy,
            "limit_bytes": limit, "swap_bytes": swap, "backend": "vm",
            "limit_enforced": False, "termination": termination,
            "termination_detail": f"{detail}; see console.log", "exit_code": res.rc}
    assemble(run, meta)  # tasks.csv/networks.csv from any progress the guest streamed
    return meta
