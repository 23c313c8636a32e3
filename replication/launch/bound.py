"""``python -m replication.launch.bound -- CMD ...``: run CMD (torchrun) bound to the grid.

A one-process run is the grid's child: it dies with the grid (``REPLICATION_PARENT_PID``) and
its rank 0 finds the grid's pid in ``REPLICATION_RUN_LOCKED`` as its parent's, so it trusts
the grid's lock on the run folder. Under torchrun the ranks' parent is torchrun, so both checks
would fail: a rank would exit at once (its parent is not the grid) or refuse the folder (locked
by another process). This wrapper sits between them and becomes torchrun (``exec``, same pid):

- it asks the kernel to kill it when the grid dies (PR_SET_PDEATHSIG survives exec), so
  torchrun never outlives a grid killed with -9, and the ranks die with torchrun;
- it hands both variables on with its own pid, but only when they named its parent: the grid
  that holds the lock is this process's parent, and this process the ranks'.

It is a launcher, not training code: nothing it does changes a number (the run key leaves it
out with everything before ``train``).
"""

from __future__ import annotations

import os
import signal
import sys

PARENT_ENV = "REPLICATION_PARENT_PID"
"""``replication.__main__.PARENT_ENV``: the trainer dies with this pid."""
LOCK_ENV = "REPLICATION_RUN_LOCKED"
"""``replication.train.run_folder.LOCK_ENV``: ``<pid>:<folder>``, pid holds the folder's lock."""


def handed_on(env: dict[str, str], parent: int, me: int) -> dict[str, str]:
    """``env`` with the grid's pid (``parent``) replaced by ours (``me``) in both variables."""
    out = dict(env)
    if out.get(PARENT_ENV) == str(parent):
        out[PARENT_ENV] = str(me)
    pid, sep, folder = out.get(LOCK_ENV, "").partition(":")
    if sep and pid == str(parent):
        out[LOCK_ENV] = f"{me}:{folder}"
    return out


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print("usage: python -m replication.launch.bound -- CMD ...", file=sys.stderr)
        return 2
    cmd = argv[argv.index("--") + 1:]
    parent = os.getppid()
    _die_with_parent()
    if os.getppid() != parent:  # the grid died before the kernel could be told
        return 1
    env = handed_on(dict(os.environ), parent, os.getpid())
    os.execvpe(cmd[0], cmd, env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
