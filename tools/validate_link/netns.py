"""The real link's plumbing: two network namespaces joined by a veth pair, each end shaped with
``tc qdisc ... tbf`` (root only). ``run`` builds it, starts one rank in each namespace and
removes it on every exit path; traffic goes only between the veth addresses it made.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess

__all__ = ["ADDR", "PORT", "unavailable", "Namespaces", "shape"]

ADDR = ("10.203.0.1", "10.203.0.2")
PORT = 29617


def unavailable() -> str | None:
    """Why the real link cannot be built here (None when it can)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "the real link needs root (network namespaces and tc); run it as root, e.g. sudo make validate-link"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"the real link needs {' and '.join(missing)} (iproute2) on PATH"
    return None


class Namespaces:
    """Two namespaces joined by a veth pair, named after this process; removed on exit
    (SIGTERM and SIGHUP included)."""

    def __init__(self) -> None:
        tag = f"l3v{os.getpid()}"
        self.ns = (f"{tag}a", f"{tag}b")
        self.iface = (f"{tag}a", f"{tag}b")  # one per namespace (a name is local to it)

    def __enter__(self) -> Namespaces:
        self._old = {s: signal.signal(s, _raise_exit) for s in (signal.SIGTERM, signal.SIGHUP)}
        try:
            for ns in self.ns:
                _ip("netns", "add", ns)
            _ip("link", "add", self.iface[0], "type", "veth", "peer", "name", self.iface[1])
            for ns, iface, addr in zip(self.ns, self.iface, ADDR):
                _ip("link", "set", iface, "netns", ns)
                _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", iface)
                _ip("-n", ns, "link", "set", iface, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for ns in self.ns:  # deleting a namespace deletes its end of the veth, and so the pair
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.iface[0]], capture_output=True, timeout=30)
        for s, old in self._old.items():
            signal.signal(s, old)


def shape(iface: str, rate_Bps: float) -> None:
    """Limit this namespace's end of the veth to ``rate_Bps`` (tbf; a burst of about 1 ms)."""
    burst = max(16384, int(rate_Bps * 1e-3))
    cmd = ["tc", "qdisc", "replace", "dev", iface, "root", "tbf", "rate", f"{int(8 * rate_Bps)}bit",
           "burst", str(burst), "latency", "2s"]  # fmt: skip
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if got.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {got.stderr.strip()}")


def _raise_exit(signum: int, _frame: object) -> None:
    raise SystemExit(f"stopped by signal {signum}")


def _ip(*args: str) -> None:
    got = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if got.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {got.stderr.strip()}")
