"""Where a grid's runs go: the launch layer, used by ``orchestration.grid`` alone.

- ``shape``: what a run computes on (nodes, processes, GPUs and CPUs per process, memory, time):
  declared from its config, part of it in the run key;
- ``config``: params.yaml's ``launcher:`` section (which backend, which GPUs and cores): never in
  a key;
- ``backend``: the interface the grid calls (check, submit, wait, cancel) and the registry by
  name; ``local``: this machine's cores and GPUs as disjoint slots; ``torchrun`` and ``bound``:
  how a multi-process run starts; ``env``: the placement a run records in its provenance.

This package is not training code (``code_digest.NOT_TRAINING``): it decides where a run goes,
which the key leaves out; what it hands the run — the command and the shape — enters it.
"""

from replication.launch.backend import BACKENDS, Backend, Handle, Job, make_backend, register_backend
from replication.launch.config import LauncherConfig
from replication.launch.shape import RunShape

__all__ = ["BACKENDS", "Backend", "Handle", "Job", "LauncherConfig", "RunShape", "make_backend",
           "register_backend"]
