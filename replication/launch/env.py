"""Environment variables a launcher sets for the trainer to record in its provenance.

Placement reaches the run through its environment, never through its command line or config:
the command and the config enter the run key, and where a run was placed must not
(``replication.provenance.launch_provenance`` reads these back into metrics.json).
"""

from __future__ import annotations

PREFIX = "REPLICATION_LAUNCH_"
BACKEND = PREFIX + "BACKEND"
"""The backend that placed the run (``local``, ``slurm``, ...)."""
JOB = PREFIX + "JOB"
"""The scheduler's job id (unset locally: a local run has none)."""
HOSTS = PREFIX + "HOSTS"
"""Comma-separated hosts the run was placed on."""
DEVICES = "CUDA_VISIBLE_DEVICES"
"""The GPUs the run may see (set by the launcher for every run on a GPU machine)."""


def launch_env(backend: str, hosts: list[str], job: str | None = None) -> dict[str, str]:
    """The provenance variables of one placed run."""
    env = {BACKEND: backend, HOSTS: ",".join(hosts)}
    if job is not None:
        env[JOB] = str(job)
    return env
