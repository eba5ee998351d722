"""A dockerd of a test's own, to stop and start at will without touching the machine's engine.

Restarting the shared engine would break every other test using it, so a fault test that
restarts dockerd starts its own: its own socket, data root, exec root (and so its own
containerd), config file (`live-restore` on or off) and log, all under one short directory.
It runs in a network namespace of its own (`unshare --net`): a dockerd changes host network
links as it starts and stops (one started with no bridge deletes the host's `docker0`), and
none of that may reach the machine's engine. The test image is copied from the machine's
engine (image save, then load), since nothing is ever pulled.

Needs root, `dockerd` and `unshare` (scripts/docker-up.sh installs docker.io).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from typing import IO

import httpx

from tests.support.polling import eventually_sync


def missing_tools() -> str:
    """Why a private dockerd cannot run here ("" when it can)."""
    if os.geteuid() != 0:
        return "a private dockerd needs root"
    absent = [tool for tool in ("dockerd", "unshare", "umount") if shutil.which(tool) is None]
    return f"missing {', '.join(absent)}: run scripts/docker-up.sh as root" if absent else ""


def _http(socket: Path) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(socket)), base_url="http://docker")


class PrivateEngine:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = root / "docker.sock"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    def start(self, *, live_restore: bool, timeout_s: float = 60.0) -> None:
        config = self.root / "daemon.json"
        config.write_text(json.dumps({"live-restore": live_restore}))
        self._log = self._log or (self.root / "dockerd.log").open("ab")
        self.proc = subprocess.Popen(
            ["unshare", "--net", "dockerd", *self._flags(config)],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
        )
        eventually_sync(self._answers, timeout_s, every=0.1)

    def _flags(self, config: Path) -> list[str]:
        return [
            *("--config-file", str(config), "--host", self.host),
            *("--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec")),
            *("--pidfile", str(self.root / "dockerd.pid"), "--iptables=false"),
        ]

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM and wait: with live-restore its containers keep running, else it stops them."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def restart(self, *, live_restore: bool) -> None:
        self.stop()
        self.start(live_restore=live_restore)

    def load_image(self, from_host: str, image: str) -> None:
        with _http(Path(from_host.removeprefix("unix://"))) as shared, _http(self.socket) as own:
            tar = shared.get(f"/images/{image}/get", timeout=60)
            tar.raise_for_status()
            own.post("/images/load", content=tar.content, timeout=60).raise_for_status()

    def close(self) -> None:
        """Remove every container, stop, unmount what is left under the root, delete it."""
        try:
            if self.proc is not None and self.proc.poll() is None:
                self._remove_containers()
        finally:
            self.stop()
            if self._log is not None:
                self._log.close()
            _unmount_under(self.root)
            shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        text = (self.root / "dockerd.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"dockerd exited {self.proc.returncode}:\n{self.log_tail()}")
        # a plain socket: httpx leaves the socket of a refused unix connect for the collector
        with socket.socket(socket.AF_UNIX) as conn:
            conn.settimeout(2)
            try:
                conn.connect(str(self.socket))
                conn.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
                return conn.recv(64).split(b" ")[1:2] == [b"200"]
            except OSError:
                return False

    def _remove_containers(self) -> None:
        with _http(self.socket) as own:
            for c in own.get("/containers/json", params={"all": 1}, timeout=30).json():
                own.delete(f"/containers/{c['Id']}", params={"force": 1}, timeout=60)


def _unmount_under(root: Path) -> None:
    """Lazily unmount anything a dockerd left mounted under `root` (deepest first)."""
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts]
    prefix = str(root) + "/"
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
