"""The command prefix of a multi-process run on one node, and the ports their rendezvous use.

    ports = PortBook()
    port = ports.take()            # free on this host and not handed to another run of ours
    prefix = torchrun_prefix(2, port, run_id="abc")
    # [python, -m, replication.launch.bound, --, python, -m, torch.distributed.run, --nnodes, 1,
    #  --nproc-per-node, 2, --rdzv-backend, c10d, --rdzv-endpoint, 127.0.0.1:<port>, --rdzv-id, abc,
    #  -m, replication]  + ["train", ...]
    ports.give(port)

Each concurrent run has its own rendezvous port: ``--standalone`` would pick one too, but two runs
started in the same second may race for it, and a chosen port is one we can print and test.
The ``bound`` wrapper in front makes torchrun die with the grid and tells the ranks which
process holds their run folder's lock (``launch.bound``).
"""

from __future__ import annotations

import socket
import sys
import threading


class PortBook:
    """Ports handed to the runs of this process: free when given, never given twice at once."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.held: set[int] = set()
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            for _ in range(100):
                with socket.socket() as s:
                    s.bind((self.host, 0))
                    port = s.getsockname()[1]
                if port not in self.held:
                    self.held.add(port)
                    return port
        raise RuntimeError("no free port for a rendezvous")

    def give(self, port: int | None) -> None:
        with self._lock:
            self.held.discard(port)


def torchrun_prefix(processes: int, port: int, run_id: str, host: str = "127.0.0.1") -> list[str]:
    """What precedes ``train`` for ``processes`` ranks on this node, rendezvous on ``host:port``."""
    return [sys.executable, "-m", "replication.launch.bound", "--",
            sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
            "--nproc-per-node", str(processes), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"{host}:{port}", "--rdzv-id", run_id,
            "-m", "replication"]


def single_prefix() -> list[str]:
    """What precedes ``train`` for a one-process run: the interpreter, as today."""
    return [sys.executable, "-m", "replication"]
