"""``systemd``: let the user's systemd manager create a transient scope with MemoryMax and
MemorySwapMax (no root, no cgroupfs writes of ours), then read the scope's counters.

systemd removes a scope's cgroup as soon as its last process exits, so the OOM verdict
falls back to the unit's ``Result`` (``oom-kill``), which systemd keeps for failed units.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from engine.errors import EdgeprofError
from engine.limits import cgroupfs as fs
from engine.limits.base import LimitRequest, Session

_TIMEOUT_S = 10


def _systemctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["systemctl", "--user", *args], capture_output=True, text=True,
                          timeout=_TIMEOUT_S, check=False)


def user_manager_status(env: Mapping[str, str] | None = None,
                        mountinfo: Path = fs.PROC_MOUNTINFO) -> tuple[bool, str]:
    """Whether ``systemd-run --user --scope`` can enforce a memory limit here, and if not,
    why. Creates nothing: looks for the manager's sockets, asks it whether it is running,
    and checks that the memory controller lives on cgroup v2 (systemd cannot apply
    MemoryMax on a v1 hierarchy)."""
    env = os.environ if env is None else env
    if not (shutil.which("systemd-run") and shutil.which("systemctl")):
        return False, "systemd-run/systemctl not on PATH"
    runtime = env.get("XDG_RUNTIME_DIR")
    if not runtime:
        return False, "XDG_RUNTIME_DIR is unset: no user session with a systemd user manager"
    if not ((Path(runtime) / "systemd" / "private").exists()
            or (Path(runtime) / "bus").exists()):
        return False, f"no systemd user manager socket in {runtime} (systemd/private or bus)"
    try:
        state = _systemctl("is-system-running").stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"systemctl --user is-system-running failed: {exc}"
    if state not in ("running", "degraded"):
        return False, f"systemd user manager is not running (state: {state or 'unreachable'})"
    mount = fs.v2_mount(mountinfo)
    if mount is None or "memory" not in fs.controllers(mount.mount_point):
        return False, ("the memory controller is not on cgroup v2 here, so systemd cannot "
                       "apply MemoryMax")
    return True, f"systemd user manager {state}"


class SystemdSession(Session):
    backend = "systemd"
    cgroup_version = 2

    def __init__(self, request: LimitRequest, run_id: str, allow_unenforced: bool = False,
                 proc: Path = Path("/proc"), kernel: tuple[int, int] | None = None) -> None:
        super().__init__(request)
        self.unit = f"{fs.RUN_PREFIX}{run_id}.scope"
        self.allow_unenforced = allow_unenforced
        self._proc = proc
        self._kernel = kernel
        self.enforced = request.limit_bytes is not None
        self.notes["unit"] = self.unit

    def command_prefix(self) -> list[str]:
        ram, swap = self.request.limit_bytes, self.request.swap_bytes
        return ["systemd-run", "--user", "--scope", "--quiet",
                f"--unit={self.unit.removesuffix('.scope')}",
                "-p", f"MemoryMax={'infinity' if ram is None else ram}",
                "-p", f"MemorySwapMax={'infinity' if swap is None else swap}", "--"]

    def attach_pid(self, pid: int) -> None:
        """systemd-run moves itself into the scope before it execs the command: wait for
        that, then take the scope's cgroup (read-only) from /proc/<pid>/cgroup."""
        mount = fs.v2_mount(self._proc / "self" / "mountinfo")
        deadline = time.monotonic() + _TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                path = fs.parse_proc_cgroup(self._proc / str(pid) / "cgroup").get("", "")
            except fs.CgroupError:
                break  # the process is gone already
            if path.endswith("/" + self.unit) and mount is not None:
                self.cgroup_dir = mount.mount_point / path.lstrip("/")
                break
            time.sleep(0.005)
        if self.cgroup_dir is None:
            self.notes["cgroup_reason"] = f"process {pid} never showed up in {self.unit}"
        else:
            self._check_applied()

    def _check_applied(self) -> None:
        """MemoryMax is silently ignored when the memory controller is not delegated to the
        user manager: verify the kernel-side limit."""
        reader = fs.CgroupV2Reader(self.cgroup_dir)
        self.notes["features"] = reader.features(self._kernel or fs.kernel_version())
        applied = reader.limit()
        self.notes["memory_max"] = applied
        wanted = self.request.limit_bytes
        if wanted is None or (applied is not None and applied <= wanted):
            return
        self.enforced = False
        shown = applied if applied is not None else "max" if reader.has(reader.LIMIT) else "missing"
        reason = (f"systemd: {reader.path / reader.LIMIT} is {shown}, not "
                  f"{wanted}: the memory controller is not delegated to the user manager "
                  f"(see systemd's Delegate= / user@.service); use --backend cgroup2 with "
                  f"{fs.ROOT_ENV}, or vm")
        self.notes["unenforced_reason"] = reason
        if not self.allow_unenforced:
            raise EdgeprofError(reason)

    def _result(self) -> str:
        try:
            return _systemctl("show", "-P", "Result", self.unit).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    def _reader(self) -> fs.CgroupV2Reader | None:
        """The scope's cgroup while it exists (systemd removes it once it is empty)."""
        if self.cgroup_dir is not None and self.cgroup_dir.is_dir():
            return fs.CgroupV2Reader(self.cgroup_dir)
        return None

    def oom_kills(self) -> int | None:
        reader = self._reader()
        if reader is not None:
            return reader.oom_kill_count()
        return 1 if self._result() == "oom-kill" else 0

    def hit_limit(self) -> bool:
        reader = self._reader()
        if reader is not None:
            return reader.limit_reached()
        return self._result() == "oom-kill"

    def kill_all(self) -> None:
        try:
            _systemctl("kill", "--signal=SIGKILL", self.unit)
        except (OSError, subprocess.TimeoutExpired):
            pass  # the unit is gone or the manager is unreachable: nothing we can kill

    def close(self) -> None:
        self.kill_all()
        if self.cgroup_dir is not None:
            fs.wait_empty([self.cgroup_dir])
        # a failed scope (e.g. OOM) stays loaded until its result is reset
        try:
            _systemctl("reset-failed", self.unit)
        except (OSError, subprocess.TimeoutExpired):
            pass
