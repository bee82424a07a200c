"""A background process tracked by a pid file, so that another Python process can find, signal and stop it.

The pid file holds the pid and the process's start time (field 22 of ``/proc/<pid>/stat``); a pid whose start time
differs belongs to an unrelated process that reused the number, and counts as not running. A zombie counts as not
running too. Linux only (``/proc``).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

_logger = logging.getLogger(__name__)

ProcessState = Literal["running", "paused", "stopped"]
"""``running``: alive; ``paused``: alive but stopped by SIGSTOP; ``stopped``: not alive (or never started)."""


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """Return ``(state letter, start time in clock ticks)`` of ``pid``, or ``None`` when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is parenthesised and may contain spaces; fields after it are plain.
    fields = raw[raw.rfind(")") + 2 :].split()
    return fields[0], int(fields[19])


def process_alive(pid: int) -> bool:
    """Return whether ``pid`` is a live process (a zombie is not)."""
    stat = _proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def tail(path: Path, lines: int = 30) -> str:
    """Return the last ``lines`` lines of a text file, or ``""`` when it does not exist."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64 * 1024))
            text = handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class ManagedProcess:
    """One named background process with a pid file and a log file.

    Started in its own session, so it outlives the Python process that started it and a Ctrl-C in that terminal
    does not reach it. Children of this Python process are reaped when stopped; others are polled until gone.
    """

    def __init__(self, name: str, *, pid_file: Path, log_file: Path) -> None:
        """Track the process called ``name`` through ``pid_file``, with its output appended to ``log_file``."""
        self.name = name
        self.pid_file = pid_file
        self.log_file = log_file
        self._child: subprocess.Popen[bytes] | None = None

    def pid(self) -> int | None:
        """Return the pid of the live process, or ``None`` when it is not running (stale pid files included)."""
        try:
            pid_text, start_text = self.pid_file.read_text(encoding="utf-8").split()[:2]
            pid, start = int(pid_text), int(start_text)
        except (FileNotFoundError, ValueError):
            return None
        if self._child is not None and self._child.pid == pid and self._child.poll() is not None:
            return None
        stat = _proc_stat(pid)
        if stat is None or stat[0] in ("Z", "X") or stat[1] != start:
            return None
        return pid

    def state(self) -> ProcessState:
        """Return whether the process is running, paused (SIGSTOP) or stopped."""
        pid = self.pid()
        if pid is None:
            return "stopped"
        stat = _proc_stat(pid)
        return "paused" if stat is not None and stat[0] in ("T", "t") else "running"

    def exit_status(self) -> int | None:
        """Return the exit status if this Python process started it and it has exited, else ``None``."""
        return None if self._child is None else self._child.poll()

    def start(self, argv: Sequence[str | Path], *, env: Mapping[str, str], cwd: Path) -> int:
        """Start ``argv`` unless already running; return the pid.

        Raises:
            FileNotFoundError: when the executable does not exist.
        """
        existing = self.pid()
        if existing is not None:
            _logger.info("%s already running with pid %d", self.name, existing)
            return existing
        command = [str(arg) for arg in argv]
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S%z')} starting: {' '.join(command)}\n".encode())
            log.flush()
            child = subprocess.Popen(
                command,
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._child = child
        stat = _proc_stat(child.pid)
        start_time = stat[1] if stat is not None else 0
        temporary = self.pid_file.with_suffix(".pid.tmp")
        temporary.write_text(f"{child.pid} {start_time}\n", encoding="utf-8")
        os.replace(temporary, self.pid_file)
        _logger.info("started %s with pid %d (log %s)", self.name, child.pid, self.log_file)
        return child.pid

    def signal(self, signum: signal.Signals) -> bool:
        """Send ``signum`` to the process; return whether it was running."""
        pid = self.pid()
        if pid is None:
            return False
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return False
        return True

    def stop(self, *, timeout_s: float) -> None:
        """SIGTERM (and SIGCONT, in case it is paused), wait up to ``timeout_s``, then SIGKILL; remove the pid file."""
        pid = self.pid()
        if pid is not None:
            _logger.info("stopping %s (pid %d)", self.name, pid)
            self.signal(signal.SIGTERM)
            self.signal(signal.SIGCONT)
            if not self._wait_gone(timeout_s):
                _logger.warning("%s (pid %d) ignored SIGTERM for %.1f s; sending SIGKILL", self.name, pid, timeout_s)
                self.kill()
                return
        self._forget()

    def kill(self) -> None:
        """SIGKILL the process, wait until it is gone, and remove the pid file."""
        if self.signal(signal.SIGKILL):
            self._wait_gone(10.0)
        self._forget()

    def _wait_gone(self, timeout_s: float) -> bool:
        """Wait until the process is gone (reaping it if it is our child); return whether it is."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self._child is not None and self._child.poll() is not None:
                return True
            self._reap_foreign_child()
            if self.pid() is None:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def _reap_foreign_child(self) -> None:
        """Reap the process if it is a child of this Python process started by another ``ManagedProcess``."""
        try:
            pid = int(self.pid_file.read_text(encoding="utf-8").split()[0])
            os.waitpid(pid, os.WNOHANG)
        except (FileNotFoundError, ValueError, IndexError, ChildProcessError):
            pass

    def _forget(self) -> None:
        """Remove the pid file and reap our child, if any."""
        self.pid_file.unlink(missing_ok=True)
        if self._child is not None:
            try:
                self._child.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
            else:
                self._child = None
