"""A throwaway single-node SLURM 22.05 for tests/integration/slurm/test_slurm.py (and by hand).

Everything lives in one private folder: munge key and socket, a MariaDB data directory,
slurm.conf / slurmdbd.conf, spool, state and logs. The one thing outside it is a symlink
``/etc/slurm/slurm.conf`` to its slurm.conf, made only where there is none and removed at
the end: the executor plugin removes ``SLURM_CONF`` from the environment of the ``srun``
it starts inside a job, so commands there find the configuration only in its default
place, as on a real cluster. Every
daemon runs in the foreground as a child of this process, on free localhost ports, and
is stopped by the PID it was started with. No cgroup plugin is configured
(proctrack/linuxproc, task/none, no cgroup.conf), so SLURM creates no cgroup: it enforces
no memory limit, and ``--mem`` is only bookkeeping (docs/cluster.md, "Running the paper sweep on
SLURM"). Debian's packages (slurm-wlm 22.05, munge, mariadb-server, slurmdbd) are
installed with apt-get when missing.

By hand (root)::

    # prints the SLURM_CONF to export
    .venv/bin/python -m tests.integration.slurm.slurm_cluster up /tmp/slurm
    # stops the daemons by PID
    .venv/bin/python -m tests.integration.slurm.slurm_cluster down /tmp/slurm
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = ("slurm-wlm", "munge", "mariadb-server", "slurmdbd")
COMMANDS = ("munged", "mariadbd", "mariadb-install-db", "mariadb", "slurmdbd", "slurmctld",
            "slurmd", "sbatch", "srun", "sacct", "sacctmgr", "sinfo", "squeue", "scancel")
CLUSTER = "edgeprof"
DEFAULT_CONF = Path("/etc/slurm/slurm.conf")  # where srun looks without SLURM_CONF
ACCOUNT = "test"
# the order they start in; they stop in the reverse order
DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")


class ClusterUnavailable(Exception):
    """SLURM cannot be brought up here; the message says why (a test skips with it)."""


def _run(argv: list[str], env: dict | None = None, timeout: float = 60,
         input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                          input=input)


def ensure_packages() -> None:
    """apt-get install the Debian packages whose commands are missing."""
    missing = [c for c in COMMANDS if shutil.which(c) is None
               and not Path("/usr/sbin", c).exists()]
    if not missing:
        return
    if os.geteuid() != 0:
        raise ClusterUnavailable(f"SLURM commands missing ({', '.join(missing)}) and not root "
                                 f"to apt-get install {' '.join(PACKAGES)}")
    if shutil.which("apt-get") is None:
        raise ClusterUnavailable(f"SLURM commands missing ({', '.join(missing)}) and no apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (["apt-get", "update", "-qq"],
                 ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]):
        r = _run(argv, env=env, timeout=900)
        if r.returncode != 0:
            raise ClusterUnavailable(f"{' '.join(argv)} failed: {(r.stderr or r.stdout)[-500:]}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, check, timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (OSError, subprocess.SubprocessError):
            pass
        if time.monotonic() > deadline:
            tail = log.read_text()[-1500:] if log is not None and log.is_file() else ""
            raise ClusterUnavailable(f"{what} did not come up within {timeout:.0f} s"
                                     + (f"; its log ends:\n{tail}" if tail else ""))
        time.sleep(0.3)


@dataclass
class SlurmCluster:
    root: Path
    node: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    pids: dict[str, int] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    linked_conf: bool = False  # whether DEFAULT_CONF is our symlink (removed at stop)

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment for SLURM commands (and Snakemake) talking to this cluster."""
        return dict(os.environ, SLURM_CONF=str(self.conf))

    @property
    def state_file(self) -> Path:
        return self.root / "daemons.json"

    # --- start -------------------------------------------------------------------------

    def start(self, cpus: int | None = None, memory_mb: int | None = None) -> SlurmCluster:
        if os.geteuid() != 0:
            raise ClusterUnavailable("the test cluster's daemons (munged, mariadbd, slurmd) "
                                     "need root")
        ensure_packages()
        for user in ("munge", "mysql"):
            try:
                pwd.getpwnam(user)
            except KeyError:
                raise ClusterUnavailable(f"user {user!r} is missing (its package installs "
                                         f"it)") from None
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)  # munge and mysql must reach their folders below
        for sub in ("etc", "log", "ctld", "slurmd", "munge", "db"):
            (self.root / sub).mkdir(exist_ok=True)
        try:
            self._start_munge()
            self._start_mariadb()
            self._write_conf(cpus, memory_mb)
            self._link_conf()
            self._start_slurm()
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, argv: list[str], user: str | None = None,
               env: dict | None = None) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")
        kwargs = {"user": user} if user else {}
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env or self.env,
                                start_new_session=True, **kwargs)
        log.close()
        self.procs[name] = proc
        self.pids[name] = proc.pid
        self._save_state()
        time.sleep(0.2)
        if proc.poll() is not None:
            out = (self.root / "log" / f"{name}.out").read_text()[-1500:]
            raise ClusterUnavailable(f"{name} exited at once with code {proc.returncode}: "
                                     f"{out}")

    def _start_munge(self) -> None:
        munge = pwd.getpwnam("munge")
        d = self.root / "munge"
        os.chown(d, munge.pw_uid, munge.pw_gid)
        os.chmod(d, 0o755)
        key = d / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        os.chown(key, munge.pw_uid, munge.pw_gid)
        os.chmod(key, 0o400)
        self.munge_socket = d / "munge.socket"
        self._spawn("munged", ["munged", "--foreground", "--force",
                               f"--socket={self.munge_socket}", f"--key-file={key}",
                               f"--pid-file={d / 'munged.pid'}",
                               f"--log-file={d / 'munged.log'}",
                               f"--seed-file={d / 'munged.seed'}"], user="munge")
        _wait("munged", lambda: self.munge_socket.exists(), 20, d / "munged.log")

    def _start_mariadb(self) -> None:
        mysql = pwd.getpwnam("mysql")
        d = self.root / "db"
        data = d / "data"
        os.chown(d, mysql.pw_uid, mysql.pw_gid)
        r = _run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=mysql",
                  "--auth-root-authentication-method=socket", "--skip-test-db"], timeout=180)
        if r.returncode != 0:
            raise ClusterUnavailable(f"mariadb-install-db failed: {(r.stderr or r.stdout)[-800:]}")
        self.db_socket = d / "mysqld.sock"
        self.db_port = _free_port()
        self._spawn("mariadbd", ["mariadbd", "--no-defaults", f"--datadir={data}",
                                 "--user=mysql", f"--socket={self.db_socket}",
                                 f"--port={self.db_port}", "--bind-address=127.0.0.1",
                                 "--skip-name-resolve", f"--pid-file={d / 'mariadbd.pid'}",
                                 f"--log-error={d / 'mariadbd.err'}",
                                 "--innodb-buffer-pool-size=64M"])
        _wait("mariadbd", lambda: self.db_socket.exists(), 60, d / "mariadbd.err")
        self.db_password = secrets.token_hex(12)
        sql = (f"CREATE DATABASE slurm_acct_db; "
               f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{self.db_password}'; "
               f"GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;")
        r = _run(["mariadb", "--no-defaults", f"--socket={self.db_socket}", "-u", "root",
                  "-e", sql])
        if r.returncode != 0:
            raise ClusterUnavailable(f"creating the accounting database failed: {r.stderr}")

    def _write_conf(self, cpus: int | None, memory_mb: int | None) -> None:
        cpus = cpus or os.cpu_count() or 1
        # Memory is bookkeeping here (nothing enforces it): enough for every job of
        # profiles/slurm (aggregate: 16 GiB) whatever the machine has; config_overrides
        # keeps slurmd from draining a node that declares more than it has
        memory_mb = memory_mb or 20000
        self.ports = {k: _free_port() for k in ("ctld", "slurmd", "dbd")}
        r, auth = self.root, f"AuthInfo=socket={self.munge_socket}"
        self.conf.write_text(f"""\
ClusterName={CLUSTER}
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={self.ports['ctld']}
SlurmdPort={self.ports['slurmd']}
AuthType=auth/munge
CredType=cred/munge
{auth}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={r}/ctld
SlurmdSpoolDir={r}/slurmd
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
MpiDefault=none
# no cgroup plugin anywhere: SLURM must not create cgroups on this machine
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=300
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={self.ports['dbd']}
# for accounting_storage/slurmdbd this is the MUNGE socket that sacct & co. use
AccountingStoragePass={self.munge_socket}
AccountingStoreFlags=job_comment
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
""")
        dbd = self.conf.with_name("slurmdbd.conf")
        dbd.write_text(f"""\
AuthType=auth/munge
{auth}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={self.ports['dbd']}
SlurmUser=root
LogFile={r}/log/slurmdbd.log
PidFile={r}/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={self.db_port}
StorageUser=slurm
StoragePass={self.db_password}
StorageLoc=slurm_acct_db
""")
        os.chmod(dbd, 0o600)
        self.cpus, self.memory_mb = cpus, memory_mb

    def _link_conf(self) -> None:
        if DEFAULT_CONF.is_symlink() and not DEFAULT_CONF.exists():
            DEFAULT_CONF.unlink()  # dangling: left by a cluster that was not stopped
        if DEFAULT_CONF.exists() or DEFAULT_CONF.is_symlink():
            raise ClusterUnavailable(f"{DEFAULT_CONF} exists (a SLURM configured on this "
                                     f"machine, or another test cluster): not replacing it")
        DEFAULT_CONF.parent.mkdir(parents=True, exist_ok=True)
        DEFAULT_CONF.symlink_to(self.conf)
        self.linked_conf = True
        self._save_state()

    def _save_state(self) -> None:
        self.state_file.write_text(json.dumps({"pids": self.pids,
                                               "linked_conf": self.linked_conf}))

    def _sacctmgr(self, *args: str) -> subprocess.CompletedProcess:
        return _run(["sacctmgr", "-i", *args], env=self.env)

    def _start_slurm(self) -> None:
        log = self.root / "log"
        self._spawn("slurmdbd", ["slurmdbd", "-D"])
        _wait("slurmdbd", lambda: self._sacctmgr("show", "cluster").returncode == 0, 60,
              log / "slurmdbd.log")
        for args in (("add", "cluster", CLUSTER), ("add", "account", ACCOUNT),
                     ("add", "user", "root", f"Account={ACCOUNT}")):
            r = self._sacctmgr(*args)
            if r.returncode != 0 and "Nothing new added" not in r.stdout + r.stderr:
                raise ClusterUnavailable(f"sacctmgr {' '.join(args)}: {r.stdout}{r.stderr}")
        self._spawn("slurmctld", ["slurmctld", "-D", "-i"])
        _wait("slurmctld", lambda: _run(["sinfo"], env=self.env).returncode == 0, 60,
              log / "slurmctld.log")
        self._spawn("slurmd", ["slurmd", "-D", "-N", self.node])

        def idle():
            out = _run(["sinfo", "-h", "-N", "-o", "%T"], env=self.env).stdout
            return out.strip() in ("idle", "mixed", "allocated")

        _wait("slurmd (node idle)", idle, 60, log / "slurmd.log")

    # --- use ---------------------------------------------------------------------------

    def sacct(self, *fields: str, name: str | None = None) -> list[dict[str, str]]:
        """Every job (-X: allocations, not steps) of this cluster, as dicts of ``fields``."""
        argv = ["sacct", "-X", "--parsable2", "--noheader", "--allusers",
                "--starttime", "now-1days", f"--format={','.join(fields)}"]
        if name:
            argv.append(f"--name={name}")
        r = _run(argv, env=self.env)
        if r.returncode != 0:
            raise RuntimeError(f"sacct failed: {r.stderr}")
        return [dict(zip(fields, line.split("|"))) for line in r.stdout.splitlines() if line]

    # --- stop --------------------------------------------------------------------------

    def stop(self, timeout: float = 30) -> list[str]:
        """Cancel what is left, then stop every daemon this object started, by its PID, in
        the reverse order. Returns the names of daemons that needed SIGKILL."""
        if "slurmctld" in self.pids and _alive(self.pids["slurmctld"]):
            _run(["scancel", "--full", f"--cluster={CLUSTER}", "--user=root"], env=self.env)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                r = _run(["squeue", "-h"], env=self.env)
                if r.returncode != 0 or not r.stdout.strip():
                    break
                time.sleep(0.5)
        killed = []
        for name in reversed(DAEMONS):
            pid = self.pids.get(name)
            if pid is None:
                continue
            if not _stop_pid(pid, self.procs.get(name), timeout):
                killed.append(name)
            self.pids.pop(name)
            self.procs.pop(name, None)
        if self.linked_conf and DEFAULT_CONF.is_symlink() \
                and DEFAULT_CONF.readlink() == self.conf:
            DEFAULT_CONF.unlink()
        self.linked_conf = False
        if self.state_file.exists():
            self.state_file.unlink()
        return killed


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie left for a non-reaping init counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _stop_pid(pid: int, proc: subprocess.Popen | None, timeout: float) -> bool:
    """SIGTERM ``pid``, wait, SIGKILL if needed; True if it ended on SIGTERM."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None:
            if proc.poll() is not None:
                return True
        elif not _alive(pid):
            return True
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    if proc is not None:
        proc.wait()
    return False


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("up", "down"):
        print("usage: python -m tests.integration.slurm.slurm_cluster up|down FOLDER",
              file=sys.stderr)
        return 2
    root = Path(argv[1]).resolve()
    cluster = SlurmCluster(root)
    if argv[0] == "up":
        cluster.start()
        print(f"export SLURM_CONF={cluster.conf}  # daemons: {cluster.pids}")
        return 0
    state = json.loads(cluster.state_file.read_text())
    cluster.pids, cluster.linked_conf = state["pids"], state["linked_conf"]
    print("needed SIGKILL:", cluster.stop() or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
