"""One Python process that runs ``python -m replication`` commands one after the other, for tests
that run the CLI several times in the same environment and need the imports (torch, the configs)
paid once, not once per command.

    with CliSession(env, cwd=ROOT) as cli:
        rc, out, err = cli("prefetch", "--scale", "paper")    # replication.__main__.main(argv)

Each command goes to ``replication.__main__.main`` (what ``python -m replication`` calls) with its
stdout and stderr captured; the process lives until the session closes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_MARK = "@@cli-session@@ "
_SERVER = f"""
import contextlib, io, json, sys
from replication.__main__ import main
for line in sys.stdin:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(json.loads(line))
        except SystemExit as stop:
            rc = stop.code if isinstance(stop.code, int) else 1
    sys.__stdout__.write({_MARK!r} + json.dumps([rc, out.getvalue(), err.getvalue()]) + "\\n")
    sys.__stdout__.flush()
"""


class CliSession:
    """The process (module doc); ``__call__`` runs one command and returns (rc, stdout, stderr)."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self._proc = subprocess.Popen([sys.executable, "-c", _SERVER], cwd=cwd, env=env, text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(list(argv)) + "\n")
        self._proc.stdin.flush()
        for line in self._proc.stdout:
            if line.startswith(_MARK):
                rc, out, err = json.loads(line[len(_MARK):])
                return rc, out, err
        raise RuntimeError(f"the CLI session ended (exit {self._proc.wait()}) during {list(argv)}")

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=60)

    def __enter__(self) -> "CliSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
