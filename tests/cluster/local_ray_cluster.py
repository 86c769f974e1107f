"""A throw-away Ray cluster on this machine: a head node and worker nodes, each a `ray start --block` process.

Each node runs in its own session (process group), with its log under `root`, free ports, a small object
store and few CPUs; the nodes share a short temp dir in /tmp (Ray's socket paths must fit in 107 bytes),
which `stop()` removes. `stop()` ends each node by its own pid (SIGTERM: `ray start --block` then stops
the daemons it started), then SIGKILLs whatever is left in those process groups; nothing outside them is
touched (no `ray stop`, which would end every Ray process of this user).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class LocalRayCluster:
    def __init__(self, root: Path, nodes: int = 2, cpus_per_node: int = 1, object_store_mb: int = 80) -> None:
        self.root = root
        # Ray's socket paths live under its temp dir and must fit AF_UNIX's 107 bytes: pytest's own temp paths
        # (/tmp/pytest-of-USER/pytest-N/popen-gwN/...) are too long on some machines, so the temp dir is short.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
        self.procs: list[subprocess.Popen[bytes]] = []
        self.port = free_ports(1)[0]
        self.address = f"127.0.0.1:{self.port}"
        self.nodes = nodes
        try:
            for i in range(nodes):  # side by side: a worker node keeps trying the head until it is up
                self._start_node(i, cpus_per_node, object_store_mb)
        except BaseException:
            self.stop()
            raise

    def _start_node(self, i: int, cpus: int, store_mb: int) -> None:
        (nm, om, agent_http, agent_grpc, env_agent, metrics, dash) = free_ports(7)
        lo = free_ports(1)[0]
        cmd = [RAY, "start", "--block", "--num-cpus", str(cpus), "--object-store-memory", str(store_mb << 20),
               "--node-ip-address", "127.0.0.1", "--disable-usage-stats",
               "--node-manager-port", str(nm), "--object-manager-port", str(om),
               "--dashboard-agent-listen-port", str(agent_http), "--dashboard-agent-grpc-port", str(agent_grpc),
               "--runtime-env-agent-port", str(env_agent), "--metrics-export-port", str(metrics),
               "--min-worker-port", str(lo), "--max-worker-port", str(lo + 40), "--temp-dir", str(self.temp_dir)]
        if i == 0:
            cmd += ["--head", "--port", str(self.port), "--include-dashboard", "false",
                    "--dashboard-port", str(dash)]
        else:
            cmd += ["--address", self.address]
        log = open(self.root / f"node{i}.log", "wb")  # noqa: SIM115 - closed with the process
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env))
        log.close()

    def connect(self, timeout: float = 120.0) -> None:
        """`ray.init` this process as a driver once every node is up (polls `ray.nodes()`: no CLI runs)."""
        import ray

        deadline = time.monotonic() + timeout
        while True:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a ray node exited with {p.returncode}: " + self.logs())
            if not ray.is_initialized():
                with contextlib.suppress(ConnectionError, RuntimeError):
                    with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                        pass
                    ray.init(address=self.address, log_to_driver=False, configure_logging=False)
            if ray.is_initialized() and sum(1 for n in ray.nodes() if n["Alive"]) >= self.nodes:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the local ray cluster did not reach {self.nodes} nodes: " + self.logs())
            time.sleep(0.5)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted(self.root.glob("node*.log")))

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(30)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)  # the group this node's `ray start` led (its daemons)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(5)
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def leftover_pids(self) -> list[int]:
        """Processes still in the nodes' process groups (none once `stop` is done)."""
        groups = {p.pid for p in self.procs}
        out = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.getpgid(int(d.name)) in groups:
                        out.append(int(d.name))
        return out
