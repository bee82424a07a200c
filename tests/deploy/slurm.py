"""A real single-node SLURM for the tests: Debian's slurmctld, slurmd and munge, unpacked into ``$OTEL_RL_HOME/slurm``
and started as plain processes (no systemd, no system install, no root-owned paths), torn down by pid.

:func:`ensure_slurm` fetches the packages with ``apt-get download`` (after ``apt-get update`` when the package lists
do not have them) and unpacks them with ``dpkg -x``; the binaries find their libraries and plugins through
``LD_LIBRARY_PATH`` and ``PluginDir``, and slurmd its step daemon through ``-d``. :class:`LocalSlurm` writes a
munge key and a ``slurm.conf`` for this host (proctrack/linuxproc, task/none: no cgroups needed) on free ports.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from otel_rl_ops.stack.config import find_free_ports
from otel_rl_ops.stack.gotools import InstallError, install_lock, run_tool

PACKAGES = (
    "slurmctld",
    "slurmd",
    "slurm-client",
    "slurm-wlm-basic-plugins",
    "munge",
    "libmunge2",
    "libhwloc15",
    "liblua5.1-0",
)
"""Debian bookworm's SLURM 22.05 and munge, with the libraries a fresh machine of this kind lacks (the others,
liblz4, libnuma, libjson-c, libyaml, libdbus, libgcrypt, libpam, are in its image)."""

LIBRARY_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu/slurm-wlm")


def ensure_slurm(home: Path) -> Path:
    """Return the unpacked root of :data:`PACKAGES` under ``home/slurm``, fetching and unpacking them once.

    Raises:
        InstallError: when ``apt-get`` or ``dpkg`` fails (e.g. not root, or no package repository reachable).
    """
    root = home / "slurm" / "root"
    stamp = home / "slurm" / "packages"
    if stamp.is_file() and stamp.read_text().split() == list(PACKAGES):
        return root
    with install_lock(home):
        if stamp.is_file() and stamp.read_text().split() == list(PACKAGES):
            return root
        with tempfile.TemporaryDirectory(prefix=".slurm-", dir=home) as scratch:
            debs = Path(scratch) / "debs"
            debs.mkdir()
            try:
                run_tool(["apt-get", "download", *PACKAGES], cwd=debs)
            except InstallError:
                run_tool(["apt-get", "update", "-q"])
                run_tool(["apt-get", "download", *PACKAGES], cwd=debs)
            unpacked = Path(scratch) / "root"
            for deb in sorted(debs.glob("*.deb")):
                run_tool(["dpkg", "-x", deb, unpacked])
            shutil.rmtree(root, ignore_errors=True)
            root.parent.mkdir(parents=True, exist_ok=True)
            os.replace(unpacked, root)
        stamp.write_text("\n".join(PACKAGES) + "\n")
    return root


class LocalSlurm:
    """munged, slurmctld and slurmd of one single-node cluster (this host, all its CPUs) in ``state``."""

    def __init__(self, root: Path, state: Path) -> None:
        self.root = root
        self.state = state
        self.node = socket.gethostname().split(".")[0]
        self.cpus = os.cpu_count() or 1
        self._processes: list[subprocess.Popen[bytes]] = []
        self.env = {
            **os.environ,
            "PATH": f"{root / 'usr/bin'}{os.pathsep}{os.environ['PATH']}",
            "LD_LIBRARY_PATH": os.pathsep.join(str(root / d) for d in LIBRARY_DIRS),
            "SLURM_CONF": str(state / "slurm.conf"),
        }

    def _start(self, name: str, argv: list[str | Path]) -> None:
        log = (self.state / f"{name}.out").open("wb")
        self._processes.append(
            subprocess.Popen([str(arg) for arg in argv], env=self.env, stdout=log, stderr=subprocess.STDOUT)
        )

    def start(self, *, timeout_s: float = 60.0) -> None:
        """Start munged, slurmctld and slurmd; return once the node is idle."""
        munge = self.state / "munge"
        munge.mkdir(parents=True, mode=0o700)
        sbin = self.root / "usr" / "sbin"
        run_tool([sbin / "mungekey", "--create", f"--keyfile={munge / 'munge.key'}"], env=self.env)
        self._start(
            "munged",
            [
                sbin / "munged",
                "--foreground",
                "--force",
                f"--socket={munge / 'socket'}",
                f"--key-file={munge / 'munge.key'}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--seed-file={munge / 'seed'}",
                f"--log-file={munge / 'munged.log'}",
            ],
        )
        ctld_port, slurmd_port = find_free_ports(2)
        (self.state / "slurm.conf").write_text(self._config(ctld_port, slurmd_port))
        self._start("slurmctld", [sbin / "slurmctld-wlm", "-D", "-i", "-f", self.state / "slurm.conf"])
        self._start(
            "slurmd",
            [
                sbin / "slurmd-wlm",
                "-D",
                "-f",
                self.state / "slurm.conf",
                "-d",
                sbin / "slurmstepd-wlm",
            ],
        )
        deadline = time.monotonic() + timeout_s
        while self.command("sinfo", "--noheader", "--format=%t").stdout.strip() != "idle":
            if time.monotonic() > deadline or any(p.poll() is not None for p in self._processes):
                raise RuntimeError(f"the SLURM node did not become idle; logs in {self.state}")
            time.sleep(0.5)

    def _config(self, ctld_port: int, slurmd_port: int) -> str:
        state, plugins = self.state, self.root / LIBRARY_DIRS[1]
        first_job = random.randint(100_000, 900_000)  # job ids, hence run ids, unique across runs of the suite
        return f"""ClusterName=otelrl
SlurmctldHost={self.node}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={state / "munge" / "socket"}
PluginDir={plugins}
StateSaveLocation={state / "slurmctld"}
SlurmdSpoolDir={state / "slurmd"}
SlurmctldPidFile={state / "slurmctld.pid"}
SlurmdPidFile={state / "slurmd.pid"}
SlurmctldLogFile={state / "slurmctld.log"}
SlurmdLogFile={state / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
FirstJobId={first_job}
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

    def command(
        self, *argv: str | Path, env: dict[str, str] | None = None, timeout_s: float = 600.0
    ) -> subprocess.CompletedProcess[str]:
        """Run a SLURM client command (``sbatch``, ``sinfo``, ...) against this cluster, with :attr:`env` and
        ``env`` on top (sbatch hands the environment on to the job)."""
        return subprocess.run(
            [str(arg) for arg in argv],
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )

    def stop(self) -> None:
        """Stop slurmd, slurmctld and munged (SIGTERM, then SIGKILL), newest first."""
        for process in reversed(self._processes):
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


@contextmanager
def local_slurm(home: Path, state: Path) -> Iterator[LocalSlurm]:
    """A started :class:`LocalSlurm` with its packages from :func:`ensure_slurm`, stopped on exit."""
    cluster = LocalSlurm(ensure_slurm(home), state)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
