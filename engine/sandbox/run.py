"""Host side of the vm and uml backends: size the guest, boot it, collect the run folder.

``run_in_sandbox`` is ``python -m engine run --backend vm`` (a qemu guest) or ``--backend uml``
(a user-mode Linux kernel, ``engine.sandbox.uml``): the guest runs the same command
with ``--backend cgroup2`` under its own cgroup root and writes the run folder into the
writable share, a hidden folder beside ``--out``; the host adds the VM facts to meta.json
(accelerator, guest kernel, guest RAM, swap device, ``emulated``) and renames the folder
into place. A guest that fails to come up still yields a run folder: termination
``error``, with the console log in it. An interrupted run leaves nothing behind.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.caffe.wire import UML_READS_ENV, UNORDERED
from engine.errors import EdgeprofError
from engine.files import naming, sha256_file
from engine.probes import hostload
from engine.probes.vmstat import GUEST_ENV
from engine.runner.meta import RunMeta, host_facts
from engine.runner.outdir import OutClaim
from engine.runner.request import RunRequest
from engine.runtime.bound import graph_bound_bytes, run_bound_mb
from engine.sandbox import boot as vmboot
from engine.sandbox import hostmaps, uml
from engine.sandbox.config import (
    ENV_NAMES,
    RAM_STEP,
    SandboxConfig,
    default_ram,
    uml_userspace,
)
from engine.sandbox.guest import CACHE_ENV, Guest, default_cache, load_guest
from engine.sandbox.paths import check_inputs_visible, check_share
from engine.schedule.pipelines import Pipeline
from engine.schedule.policies import Policy
from engine.signals import Interrupted, Signalled, ignore_signals, signals_unwind
from engine.units import MIB

GUEST_RESERVE = 256 * MIB  # the least the guest needs beside the run's cgroup
DEVICE_SLACK = 64 * MIB  # swap device a bit larger than memory.swap.max: the cgroup limits
GUEST_SHARE = "/run/vmout"  # the share, as the guest sees it
# in the share, per run i of a boot: the RunRequest the guest runs, and its --out
REQUEST_NAME = "request-{}.json"
RUN_NAME = "run-{}"


@dataclass
class Plan:
    ram_bytes: int
    swap_device_bytes: int  # 0: no swap device
    accel: str
    accel_reason: str
    sd_card: bool = False
    preload: Path | None = None  # uml: LD_PRELOADed in the guest (engine/sandbox/ascend.c)
    bound: int | None = None  # an unconstrained run's bound the RAM was sized by


def _host_ram() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def plan(cfg: SandboxConfig, limit: int | None, swap: int | None, guest: Guest | uml.Uml,
         bound: int | None = None) -> Plan:
    """Guest RAM: EDGEPROF_SANDBOX_RAM's, else ``default_ram`` of the limit and ``bound``
    (``unconstrained_bound_bytes``), and a swap device large enough that memory.swap.max
    is what limits swap. A UML kernel runs on the host CPU (accelerator "uml"). The guest
    writes its RAM once before its first run (engine.sandbox.job.warm_ram), in time that
    grows with it: the host holds all of it for the boot."""
    sandbox = "uml" if isinstance(guest, uml.Uml) else "vm"
    if cfg.ram is not None:
        ram = cfg.ram
        if limit is not None and limit + GUEST_RESERVE > ram:
            raise EdgeprofError(
                f"{sandbox}: the limit ({limit // MIB} MiB) is above the guest RAM minus what the "
                f"guest itself needs ({ram // MIB} - {GUEST_RESERVE // MIB} MiB): raise "
                f"{ENV_NAMES['RAM']} to at least {-(-(limit + GUEST_RESERVE) // MIB)}M or unset "
                f"it")
        ram = -(-ram // RAM_STEP) * RAM_STEP
    else:
        ram = default_ram(limit, bound)
    host = _host_ram()
    if host and ram > host:
        if cfg.ram is not None:
            what, lower = "", ENV_NAMES["RAM"]
        elif bound is not None and (limit is None or bound >= limit):
            what, lower = " for this unconstrained run", "--batch or run fewer networks"
        elif limit is None:
            what, lower = " without a limit", ENV_NAMES["RAM"]
        else:
            what, lower = " for this limit", "--limit"
        raise EdgeprofError(f"{sandbox}: the guest would need {ram // MIB} MiB of RAM{what} "
                            f"but the host has {host // MIB} MiB; lower {lower}")
    device = swap_device_bytes(cfg, swap)
    if isinstance(guest, uml.Uml):
        cfg.refuse_unsupported("uml")
        uml_userspace()  # a bad mode is refused here, before the boot
        return Plan(ram, device, "uml", f"user-mode Linux {guest.kernel_version} "
                                        f"({guest.suite}'s {guest.package})",
                    preload=guest.preload if cfg.ascend else None, bound=bound)
    if cfg.accel in ("kvm", "tcg"):
        accel, why = cfg.accel, f"set by {ENV_NAMES['ACCEL']}"
    elif cfg.accel == "auto":
        accel, why = vmboot.kvm_status(guest)
    else:
        raise EdgeprofError(f"{ENV_NAMES['ACCEL']}={cfg.accel!r}: use auto, kvm or tcg")
    return Plan(ram, device, accel, why, cfg.sd_card and device > 0, bound=bound)


def swap_device_bytes(cfg: SandboxConfig, swap: int | None) -> int:
    """The guest's swap device for memory.swap.max ``swap`` (None: unlimited); 0: none."""
    return 0 if swap == 0 else cfg.swap_device if swap is None else swap + DEVICE_SLACK


def check_swap_room(cfg: SandboxConfig, swap: int, out: str) -> None:
    """Refuse, before the boot, a --swap whose swap image (a sparse file beside ``out``,
    filled as the guest swaps) is larger than the free space of its filesystem."""
    device = swap_device_bytes(cfg, swap)
    folder = Path(os.path.abspath(out)).parent
    existing = next(p for p in (folder, *folder.parents) if p.is_dir())  # made by the run
    free = shutil.disk_usage(existing).free
    if device > free:
        raise EdgeprofError(f"--swap of {swap / 2**30:.1f} GiB: the guest's swap image of "
                            f"{device / 2**30:.1f} GiB (beside --out, in {folder}) is more "
                            f"than the {free / 2**30:.1f} GiB free on its filesystem; ask "
                            f"for less swap or put --out on a filesystem with room")


@functools.cache
def host_blas_core() -> str | None:
    """The kernels (core type) numpy's OpenBLAS chose in this process, None if it is not
    OpenBLAS or does not say."""
    import numpy  # noqa: F401  (loads numpy's BLAS, which threadpoolctl then reads)
    from threadpoolctl import threadpool_info

    for info in threadpool_info():
        if info.get("internal_api") == "openblas" and info.get("architecture"):
            return str(info["architecture"])
    return None


def job_script(py_args: list[str], accel: str, cwd: Path, preload: Path | None = None
               ) -> str:
    """The job for /run/vmout/job.sh: the guest's environment is empty (env -i).
    ``preload``: UML's ascend.so, for every process of the job (None: faults unordered)."""
    # EDGEPROF_CGROUP_ROOT comes from init.sh, which creates that cgroup
    env = {"PYTHONDONTWRITEBYTECODE": "1", GUEST_ENV: "1", "HOME": "/root",
           "TMPDIR": "/run/scratch"}
    if sys.pycache_prefix:  # where the host's bytecode is (engine.bytecode), as here
        env["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix
    if accel == "tcg":
        # OpenBLAS picks "Katmai" under -cpu max, and its AVX2/FMA kernels crawl under TCG
        env["OPENBLAS_CORETYPE"] = "Nehalem"
    elif accel == "uml":
        # UML 7.2 loses what its kernel writes into swapped-in anonymous pages: weights go
        # through a locked buffer (engine.caffe.wire), into pages faulted in ascending
        # order, as the preload faults every copy's destination (engine/sandbox/ascend.c)
        env[UML_READS_ENV] = "1" if preload else UNORDERED
        if preload:
            env["LD_PRELOAD"] = str(preload)
        if host_blas_core():
            # UML runs its processes on the host CPU, but OpenBLAS may pick other kernels
            # in it (SkylakeX in UML 7.2 where the AMD EPYC host picks Haswell): other
            # rounding, other bits than the native runs the sandbox's are compared with
            env["OPENBLAS_CORETYPE"] = host_blas_core()
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    # job output goes to a file: the emulated serial console is slow
    return (f"{exports}cd {shlex.quote(str(cwd))} || exit 97\n"
            f"{shlex.join([sys.executable, '-m', 'engine.guestjob', *py_args])} "
            f"> /run/vmout/job.log 2>&1\n"
            f"rc=$?\ntail -n 20 /run/vmout/job.log\nexit $rc\n")


def boot_job(py_args: list[str], share: Path, limit: int | None, swap: int | None,
             cfg: SandboxConfig | None = None, timeout_s: float | None = None,
             sandbox: str = "vm", stall_s: float | None = None,
             cpus: set[int] | None = None, bound: int | None = None
             ) -> tuple[vmboot.BootResult, Plan, Guest | uml.Uml, dict | None]:
    """Boot once running ``python -m engine.guestjob PY_ARGS`` with ``share`` as /run/vmout,
    in ``sandbox`` ("vm": qemu, "uml": user-mode Linux; ``stall_s``: how long a guest
    process may sit at the host's mapping cap; ``cpus``: the host CPUs it runs on;
    ``bound``: what an unconstrained run may hold, as ``plan``).
    Returns the boot result, the plan, the guest and the guest's guest.json (or None)."""
    cfg = cfg or SandboxConfig.from_env()
    guest = built_sandbox(sandbox)
    p = plan(cfg, limit, swap, guest, bound)
    with naming(share / "job.sh"):
        (share / "job.sh").write_text(job_script(py_args, p.accel, Path.cwd(), p.preload))
    res = vmboot.boot(guest, share, accel=p.accel, ram_mb=p.ram_bytes // MIB, smp=cfg.smp,
                      swap_bytes=p.swap_device_bytes, sd_card=p.sd_card,
                      boot_timeout_s=cfg.boot_timeout_s, timeout_s=timeout_s or cfg.timeout_s,
                      stall_s=stall_s, cpus=cpus)
    facts_file = share / "guest.json"
    facts = json.loads(facts_file.read_text()) if facts_file.is_file() else None
    return res, p, guest, facts


def built_sandbox(sandbox: str) -> Guest | uml.Uml:
    """The built kernel of ``sandbox``; a run never builds one (a download of hundreds of
    MB into wherever the cache variable points): that is ``python -m engine.sandbox build``."""
    if sandbox == "uml":
        built = uml.load_uml()
        if built is None:
            raise EdgeprofError(f"uml: {uml.why_none()}; build it with python -m engine.sandbox "
                                f"build (setup.sh does), or use --backend vm")
        return built
    vmboot.qemu_binary()
    built = load_guest()
    if built is None:
        raise EdgeprofError(f"the vm guest is not built in {default_cache()} "
                            f"(${CACHE_ENV}); build it with python -m engine.sandbox build "
                            f"(setup.sh does)")
    return built


def run_command_in_sandbox(argv: list[str], limit: int | None, swap: int | None,
                           cfg: SandboxConfig | None = None, timeout_s: float | None = None,
                           workdir: Path | None = None, sandbox: str = "vm",
                           stall_s: float | None = None) -> dict:
    """ARGV in the guest under a cgroup2 session with memory.max=limit and memory.swap.max=
    swap (None: no limit). Returns {"guest": guest.json, "boot": boot facts, "sandbox":
    the meta.json "sandbox" facts, "job_log", "console"}. Nothing is left behind. ``stall_s``: how
    long a UML guest process may sit at the host's mapping cap."""
    share = Path(tempfile.mkdtemp(prefix=".edgeprof-vm.", dir=workdir))
    try:
        with signals_unwind():
            res, p, guest, facts = boot_job(
                ["command", "max" if limit is None else str(limit),
                 "max" if swap is None else str(swap), *argv],
                share, limit, swap, cfg, timeout_s, sandbox=sandbox, stall_s=stall_s)
        log = share / "job.log"
        boot_facts = asdict(res)
        boot_facts.pop("console")
        return {"guest": facts, "boot": boot_facts,
                "sandbox": sandbox_facts(res, p, guest, facts),
                "job_log": log.read_text() if log.is_file() else "", "console": res.console}
    finally:
        shutil.rmtree(share, ignore_errors=True)


def sandbox_facts(res: vmboot.BootResult, p: Plan, guest: Guest | uml.Uml,
                  facts: dict | None) -> dict:
    """What meta.json records under "sandbox"."""
    facts = facts or {}
    start = facts.get("job_start_uptime_s")
    cmd_start = res.guest_marks.get("guest_VM_CMD_START")
    job_start = (None if None in (start, cmd_start, res.boot_s)
                 else res.boot_s + start - cmd_start)  # guest clock -> host seconds
    in_uml = isinstance(guest, uml.Uml)
    device = ("ubd /dev/ubda (sparse file on the host)" if in_uml
              else "virtio-blk /dev/vda (sparse file on the host)")
    return {"kernel": "uml" if in_uml else "vm",
            "uml_userspace": uml.userspace_mode(res.console) if in_uml else None,
            "host_max_map_count": uml.max_map_count() if in_uml else None,
            "host_maps_peak": res.host_maps_peak,
            "uml_preload": _preload_facts(p.preload) if in_uml else None,
            "accelerator": p.accel, "accelerator_reason": p.accel_reason,
            # UML runs on the host CPU but its page faults and system calls go through
            # its kernel: its times are not native either (docs/sandboxes.md)
            "emulated": p.accel in ("tcg", "uml"),
            "guest_kernel": facts.get("kernel", guest.kernel_version),
            "kernel_package": guest.package,
            "guest_ram_bytes": p.ram_bytes, "boot_unconstrained_bound_bytes": p.bound,
            "guest_mem_total_bytes": facts.get("MemTotal"),
            "swap_device": {"size_bytes": p.swap_device_bytes,
                            "device": device if p.swap_device_bytes else None,
                            "sd_card_throttle": vmboot.SD_THROTTLE if p.sd_card else None},
            "boot_s": res.boot_s, "job_start_s": job_start, "vm_total_s": res.total_s,
            "guest_uptime_at_start_s": start,
            "guest_job_s": facts.get("job_s"), "vmstat_delta": facts.get("vmstat_delta"),
            "swap_used_at_start": facts.get("swap_used_at_start"),
            "page_cache_at_start": facts.get("page_cache_at_start"),
            "ram_warmed_bytes": facts.get("ram_warmed_bytes"),
            "ram_warm_s": facts.get("ram_warm_s"),
            "error": res.error}


def run_in_sandbox(request: RunRequest, cfg: SandboxConfig | None = None,
                   auto: dict | None = None, sandbox: str = "vm") -> RunMeta:
    """``engine run`` with ``--backend vm`` or ``uml`` (``sandbox``): a block of one run
    (``run_block_in_sandbox``); returns its written meta.json."""
    return run_block_in_sandbox([request], cfg, auto, sandbox)[0]


def _check_request(request: RunRequest, cfg: SandboxConfig, sandbox: str) -> tuple:
    """What the host can check of a run before any boot: its inputs, its share, that the
    guest sees every file it reads, room for its swap. Returns check_inputs's result."""
    from engine.runner.supervise import check_inputs

    checked = check_inputs(request)  # in a second, not after a boot
    _, _, _, descs = checked
    check_share(request.out, sandbox)  # auto's choice too: before any folder exists
    # twenty-fifth held-out pass M5: a split in /dev/shm passed every host check, and the
    # guest then said the pipeline did not exist
    check_inputs_visible({"--pipeline": request.pipeline, "--split": request.split,
                          **{f"{net}'s caffemodel": d.resolve(d.caffemodel)
                             for net, d in descs.items()},
                          **{f"{net}'s prototxt": d.resolve(d.prototxt)
                             for net, d in descs.items()},
                          # each partial, its folder or itself maybe a link from
                          # elsewhere (twenty-sixth pass M1)
                          **{f"{net}'s partial {x.partial}": d.resolve(x.partial)
                             for net, d in descs.items() for x in d.layers if x.partial}},
                         sandbox)
    if request.limits.swap_bytes is not None:  # a size asked for (max: the config's device)
        check_swap_room(cfg, request.limits.swap_bytes, request.out)
    return checked


def unconstrained_bound_bytes(request: RunRequest, checked: tuple) -> int:
    """What an unconstrained run of ``request`` may hold at most (engine.runtime.bound),
    from the prototxts of the networks it runs (``checked``: ``check_inputs``'s)."""
    from engine.network import deploy_graph

    policy, pipeline, _, descs = checked
    batch, runtime = request.options.batch, request.options.runtime
    bounds = [graph_bound_bytes(deploy_graph(descs[n].resolve(descs[n].prototxt), batch),
                                runtime) for n in pipeline.networks()]
    return run_bound_mb(bounds, policy.workers) * MIB


# what every run of one boot shares: its CPUs and stall watch (each run's limit and swap
# are its own cgroup's; the guest is sized for them all: ``boot_sizes``)
BOOT_SETTINGS = {"--pin-cpu": lambda r: r.options.pin_cpu,
                 "--stall-timeout": lambda r: r.options.stall_s}


def boot_sizes(cfg: SandboxConfig, requests: list[RunRequest], checked: list[tuple]
               ) -> tuple[int | None, int | None, int | None]:
    """(limit, swap, bound) for ``plan`` of one boot of ``requests``: the largest limit
    (None: none limited), the swap whose device is the largest, and the largest
    ``unconstrained_bound_bytes`` of its unconstrained runs (None: none)."""
    limits = [r.limits.limit_bytes for r in requests if r.limits.limit_bytes is not None]
    swap = max((r.limits.swap_bytes for r in requests),
               key=lambda s: swap_device_bytes(cfg, s))
    bounds = [unconstrained_bound_bytes(r, c) for r, c in zip(requests, checked)
              if r.limits.limit_bytes is None]
    return max(limits, default=None), swap, max(bounds, default=None)


def _boot_timeout(requests: list[RunRequest]) -> float | None:
    """The host's timeout of a boot running ``requests``: each run's own, half as long again
    and 5 minutes more (the guest's slower start, a loaded host), summed; None if a run
    has none."""
    timeouts = [r.options.timeout_s for r in requests]
    return None if None in timeouts else sum(t * 1.5 + 300 for t in timeouts)


def run_block_in_sandbox(requests: list[RunRequest], cfg: SandboxConfig | None = None,
                         auto: dict | None = None, sandbox: str = "vm") -> list[RunMeta]:
    """``engine run`` with ``--backend vm`` or ``uml`` (``sandbox``), for a block of runs
    one after another in one boot (``engine run-block``); returns each run's written
    meta.json, in order. The guest gets each request as JSON (its out in the share,
    backend cgroup2) and resets the page cache and swap before each run
    (engine.sandbox.job). A run the boot did not reach (an earlier run's guest crashed or
    timed out) goes to the next boot, as does, once, a run the emulator failed
    (``_emulation_fault``). ``auto``: auto's notes when it chose the sandbox. Raises
    Interrupted on SIGINT/SIGTERM/SIGHUP, after killing the guest and removing every
    file of the runs not yet published."""
    if not requests:
        raise EdgeprofError("a block of runs needs at least one run")
    cfg = cfg or SandboxConfig.from_env()  # a bad setting fails before anything is written
    for flag, value in BOOT_SETTINGS.items():
        if len({value(r) for r in requests}) > 1:
            raise EdgeprofError(f"the runs of one boot differ in {flag}; give them the same "
                                f"{flag}, or run them apart")
    checked = [_check_request(r, cfg, sandbox) for r in requests]
    first = requests[0]
    limit, swap, bound = boot_sizes(cfg, requests, checked)
    metas: list[RunMeta | None] = [None] * len(requests)
    share = pin = None
    with ExitStack() as claims, signals_unwind():
        try:
            claim = [claims.enter_context(OutClaim(r.out, r.force, r.inputs()))
                     for r in requests]
            share = claim[0].tempdir("vm.")
            for i, r in enumerate(requests):
                inner = r.with_changes(pipeline=str(Path(r.pipeline).resolve()),
                                       split=str(Path(r.split).resolve()),
                                       out=f"{GUEST_SHARE}/{RUN_NAME.format(i)}",
                                       force=False, backend="cgroup2")
                with naming(share / REQUEST_NAME.format(i)):
                    (share / REQUEST_NAME.format(i)).write_text(inner.to_json())
            pin = _pin_uml(first.options.pin_cpu and sandbox == "uml")
            todo, retried = list(range(len(requests))), {}
            while todo:
                load_start, started_at = hostload.snapshot(), time.time()
                res, p, guest, _ = boot_job(["engines", *map(str, todo)], share, limit, swap,
                                            cfg, _boot_timeout([requests[i] for i in todo]),
                                            sandbox=sandbox, stall_s=first.options.stall_s,
                                            cpus=pin.uml, bound=bound)
                load = hostload.host_load(load_start, hostload.snapshot())
                boot = {"runs": len(todo), "id": f"{share.name}.{len(retried)}.{todo[0]}"}
                again = []
                facts_of = {i: _guest_facts(share, i) for i in todo}
                # the run the guest was in when the boot ended (None: it ran them all)
                running = next((i for i in todo if facts_of[i] is None), None)
                for position, i in enumerate(todo):
                    facts = facts_of[i]
                    reached = facts is not None or i == running
                    why = _emulation_fault(share, res, i) if reached else ""
                    if not reached or (why and i not in retried):
                        if why:
                            # seen under TCG with two guests on two cores: a guest that
                            # stopped before the run's first task (once in 90 runs, after
                            # 6 s) and a measured child killed by SIGSEGV under a limit
                            # (once in 50; the same run alone, three times: fine). Not
                            # results of the run: boot once more, and say so.
                            retried[i] = {"why": why, "error": res.error, "rc": res.rc,
                                          "qemu_exit": res.qemu_exit,
                                          "console_tail": res.console.splitlines()[-40:]}
                        again.append(i)
                        continue
                    facts = sandbox_facts(res, p, guest, facts) | {
                        "retried_boot": retried.get(i), "host_affinity": pin.facts,
                        "boot_runs": boot["runs"], "boot_position": position,
                        "boot_id": boot["id"]}
                    meta = _record(requests[i], checked[i], share, i, res, facts, load,
                                   started_at, auto, sandbox)
                    failed = meta.termination == "error"
                    claim[i].publish(share / RUN_NAME.format(i),
                                     (meta.termination_detail or "error") if failed else None)
                    metas[i] = meta
                _clear_share(share, again)
                todo = again
            return metas
        except BaseException as exc:
            ignore_signals()  # the guest is gone (boot's finally); the share goes now, uncut
            if isinstance(exc, Signalled):
                done = sum(m is not None for m in metas)
                kept = f"; its {done} finished run(s) are kept" if done else ""
                raise Interrupted(f"run interrupted by {exc.name}; nothing written"
                                  f"{' of the rest' if done else ''}{kept}") from None
            raise
        finally:
            if pin is not None:
                pin.release()
            if share is not None:
                shutil.rmtree(share, ignore_errors=True)


def _record(request: RunRequest, checked: tuple, share: Path, i: int,
            res: vmboot.BootResult, facts: dict, load: dict, started_at: float,
            auto: dict | None, sandbox: str) -> RunMeta:
    """Run ``i``'s folder in the share made whole: the guest's record (or, where the guest
    never finished it, its progress and an error record), the sandbox's facts, the boot's
    console and the run's guest log; returns its meta."""
    policy, pipeline, models, descs = checked
    run = share / RUN_NAME.format(i)
    if (run / "meta.json").is_file():
        meta = RunMeta.read(run)
        cap_note = hostmaps.cap_note(res.host_maps_peak, uml.max_map_count())
        if meta.termination != "ok" and cap_note:  # the guest cannot see the cap
            meta.termination_detail = f"{meta.termination_detail}; {cap_note}"
    else:  # the guest never finished it: keep what it wrote, and the console
        run = _salvage(share, i)
        meta = _error_meta(request, pipeline, policy, res, run,
                           {net: models[net] for net in descs})
    swapped = (facts.get("vmstat_delta") or {}).get("pswpout")
    if request.limits.limit_bytes is None and meta.termination != "error" and swapped:
        # the guest's RAM limited it: not a baseline, however it ended (its swap device is
        # for the limited runs)
        ram = facts["guest_ram_bytes"] // MIB
        ended = "" if meta.termination == "ok" else f" (it ended: {meta.termination})"
        meta.termination = "error"
        meta.termination_detail = (
            f"the unconstrained run swapped {swapped} pages out in a guest of {ram} MiB"
            f"{ended}: the guest's RAM limited it; set {ENV_NAMES['RAM']} above {ram}M")
    # the run's start on the host's clock: the boot's, and the guest's offset
    _add_sandbox_facts(meta, facts, load, started_at + (facts["job_start_s"] or 0.0))
    if auto is not None:
        meta.limits["auto"] = auto | {"chosen": sandbox}
    out = Path(request.out)
    with naming(out / "console.log"):  # the name it is published under
        (run / "console.log").write_text(res.console)
    log = share / f"job-{i}.log"
    if log.is_file():
        with naming(out / "guest_job.log"):
            shutil.copyfile(log, run / "guest_job.log")
    meta.write(run)
    return meta


def _guest_facts(share: Path, i: int) -> dict | None:
    """Run ``i``'s record of the guest (engine.sandbox.job), None if it has none."""
    path = share / f"guest-{i}.json"
    return json.loads(path.read_text()) if path.is_file() else None


@dataclass
class UmlPin:
    """Where a UML run's host processes run: the UML kernel and the host processes of
    its guest's processes on one claimed CPU (``uml``; they wake each other at every
    trap), this supervisor (and its mapping watch) on the others."""

    uml: set[int] | None
    facts: dict
    claim: hostload.CpuClaim | None = None
    own: set[int] | None = None  # this process's CPUs before, restored at release

    def release(self) -> None:
        if self.own is not None:
            os.sched_setaffinity(0, self.own)
        if self.claim is not None:
            self.claim.close()


def _pin_uml(asked: bool) -> UmlPin:
    """Claim a CPU for a UML run (``asked``: --pin-cpu under --backend uml) as a native
    run's child claims one (hostload.claim_cpus), and move this process off it."""
    if not asked:
        return UmlPin(None, {"asked": False, "pinned": False,
                             "why_not": "not asked (--pin-cpu)"})
    claim = hostload.claim_cpus()
    if not claim.child:
        claim.close()
        return UmlPin(None, {"asked": True, "pinned": False, "why_not": claim.reason})
    own = os.sched_getaffinity(0)
    os.sched_setaffinity(0, claim.probes)
    return UmlPin(claim.child, {"asked": True, "pinned": True, "uml": sorted(claim.child),
                                "supervisor": sorted(claim.probes), "why_not": ""},
                  claim, own)


def _preload_facts(preload: Path | None) -> dict | None:
    """The preload a UML guest's processes ran with, and its digest (None: without)."""
    if preload is None:
        return None
    digest = sha256_file(preload) if preload.is_file() else None
    return {"path": str(preload), "sha256": digest, "source": uml.PRELOAD_SOURCE.name}


def _add_sandbox_facts(meta: RunMeta, facts: dict, host_load: dict,
                       started_at: float) -> None:
    """The guest's meta.json describes the guest as its host; the real host goes to
    "host" (its load over the whole sandbox run to "host_load", the boot's start on its
    clock to "started_at"), the guest and the machine to "sandbox"."""
    facts["guest"] = meta.host or None
    facts["guest_host_load"], meta.host_load = meta.host_load, host_load
    facts["guest_started_at"], meta.started_at = meta.started_at, started_at
    # the guest's monotonic clock starts at its boot: the uptime its pipeline started at
    facts["guest_uptime_at_pipeline_s"] = (None if meta.t0_monotonic_ns is None
                                           else meta.t0_monotonic_ns / 1e9)
    meta.sandbox = facts
    meta.host = host_facts()
    meta.limits["guest_backend"] = meta.limits.get("backend")
    meta.limits["backend"] = meta.backend = facts["kernel"]
    meta.emulated = facts["emulated"]


# A measured child killed by one of these under emulation: a fault of the emulated CPU
# or memory, not of the run (a segfault natively is a bug and fails the job).
FAULT_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL}


def _emulation_fault(share: Path, res: vmboot.BootResult, i: int) -> str:
    """Why run ``i``'s result in this boot is the emulator's failure rather than the
    run's ("" if it is the run's): the guest ended (not timed out) with no run folder
    and no task of it started, or, under TCG, its measured child died of SIGSEGV, SIGBUS
    or SIGILL."""
    if res.timed_out:
        return ""
    meta_path = share / RUN_NAME.format(i) / "meta.json"
    if meta_path.is_file():
        if res.accel != "tcg":
            return ""
        meta = RunMeta.read(meta_path.parent)
        code = meta.exit_code or 0
        signal_no = (meta.gnu_time or {}).get("gt_signal") or (code - 128 if code > 128
                                                              else -code)
        if meta.termination == "error" and signal_no in FAULT_SIGNALS:
            return f"the measured child died of {signal.Signals(signal_no).name} in the guest"
        return ""
    if any(_child_started(partial) for partial in _partials(share, i)):
        return ""
    return "the guest stopped before the run's first task"


def _partials(share: Path, i: int) -> list[Path]:
    """Run ``i``'s unfinished temp folders in the share (not its .lock)."""
    return sorted(share.glob(f".{RUN_NAME.format(i)}.[0-9]*"))


def _clear_share(share: Path, todo: list[int]) -> None:
    """Everything of runs ``todo`` a boot left in the share, but their requests."""
    for i in todo:
        for path in [share / RUN_NAME.format(i), share / f"job-{i}.log",
                     share / f"guest-{i}.json", *_partials(share, i)]:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _salvage(share: Path, i: int) -> Path:
    """Run ``i``'s unfinished temp folder (its progress so far), else an empty one."""
    partial = _partials(share, i)
    run = share / RUN_NAME.format(i)
    if partial:
        os.replace(partial[-1], run)
    else:
        run.mkdir(exist_ok=True)
    return run


def _error_meta(request: RunRequest, pipeline: Pipeline, policy: Policy,
                res: vmboot.BootResult, run: Path, descriptions: dict[str, Path]) -> RunMeta:
    """The record of a run the guest never finished: what was asked (the aggregate checks
    it against the config, engine.workflow.args.run_settings), and why it ended."""
    from engine.runner.folder import assemble
    from engine.runner.supervise import request_meta

    meta = request_meta(request, pipeline, policy)
    # the descriptions it was to read, as the supervisor records them
    meta.description_files = {net: str(Path(path).resolve())
                              for net, path in sorted(descriptions.items())}
    meta.description_sha256 = {net: sha256_file(path)
                               for net, path in meta.description_files.items()}
    meta.termination = "timeout" if res.timed_out in ("job", "maps") else "error"
    detail = res.error or f"the guest job ended with code {res.rc} and wrote no run folder"
    meta.termination_detail = f"{detail}; see console.log"
    meta.exit_code = res.rc
    assemble(run, meta)  # tasks.csv/networks.csv from any progress the guest streamed
    limits = request.limits
    if limits.limit_bytes is not None and _child_started(run):
        # the guest's supervisor starts the child only under a cgroup2 session that set
        # the limit (it refuses to run one it could not set): the limit bound the run up
        # to the crash (nineteenth held-out pass D3: a guest crash read "not enforced"
        # and left its cell's failure counts)
        meta.limit_enforced = True
        meta.limits = {"backend": "cgroup2", "enforced": True,
                       "limit_bytes": limits.limit_bytes, "swap_bytes": limits.swap_bytes,
                       "enforced_from": "the guest's cgroup2 session set the limit before "
                                        "the run's first task; the guest ended before it "
                                        "reported"}
    return meta


def _child_started(run: Path) -> bool:
    """Whether the measured child began the run (a task start in its streamed progress)."""
    progress = run / "progress.jsonl"
    try:
        return b'"event": "start"' in progress.read_bytes()
    except OSError:
        return False
