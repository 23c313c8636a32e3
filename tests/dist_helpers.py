"""Helpers of the multi-process tests (tests/train/test_distributed.py, test_ddp*.py): the
launchers, the small run's arguments and the "same run" comparison.

Tolerance: 1e-5 (relative, floor 1) on every float of metrics.json, steps.jsonl (timings
excluded) and prompts.jsonl, and absolute on the final weights. The two runs differ only in
float summation order (per-rank partial sums then an all-reduce, and the batch padding width of
each rank's forward pass); counts, successes and sampled tokens are identical.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TOL = 1e-5
NOT_COMPARED = {"provenance"}  # how the run ran (world size, sharding...): differs by design


def _compared(key: str) -> bool:
    """Timings (``*_seconds``, per-rank lists included) and provenance are not results."""
    return not key.endswith("_seconds") and key not in NOT_COMPARED

CASES = {
    "vip": ["--allocator", "vip", "--estimator", "rloo", "--set", "rollout.lower=3"],
    "rollout-gdro+prompt-gdro": ["--allocator", "rollout-gdro", "--prompt-weights", "gdro"],
    "dynamo+modulation": ["--allocator", "dynamo", "--modulation", "dynamo"],
}


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(HF_HUB_OFFLINE="1", DVC_NO_ANALYTICS="1", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


def _train_args(small: dict, out: Path, case: str, *extra: str, steps: int = 3) -> list[str]:
    args = ["train", "--profile", "default", "--seed", "5", "--out", str(out), "--no-progress",
            "--max-steps", str(steps), *CASES[case]]
    for k, v in {**small, "model.threads": 1}.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    return args + list(extra)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launcher(nproc: int, how: str = "torchrun") -> list[str]:
    if nproc == 1:
        return [sys.executable, "-m", "replication"]
    if how.startswith("accelerate"):  # "accelerate" (ddp.yaml) or "accelerate-fsdp" (fsdp.yaml)
        config = "fsdp.yaml" if how == "accelerate-fsdp" else "ddp.yaml"
        return [shutil.which("accelerate") or str(Path(sys.executable).parent / "accelerate"), "launch",
                "--config_file", str(REPO / "configs/accelerate" / config), "--num_processes", str(nproc),
                "--main_process_port", str(_free_port()), "-m", "replication"]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
            "-m", "replication"]


def _run(nproc: int, args: list[str], how: str = "torchrun") -> None:
    p = subprocess.run(_launcher(nproc, how) + args, env=_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]


def _close(a, b, where: str) -> None:
    if isinstance(a, dict):
        assert {k for k in a if _compared(k)} == {k for k in b if _compared(k)}, where
        for k in a:
            if _compared(k):
                _close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert (np.isnan(a) and np.isnan(b)) or abs(a - b) <= TOL * max(1.0, abs(a)), (where, a, b)
    else:
        assert a == b, (where, a, b)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _same_run(a: Path, b: Path) -> None:
    from safetensors.torch import load_file

    _close(json.loads((a / "metrics.json").read_text()), json.loads((b / "metrics.json").read_text()), "metrics")
    _close(_jsonl(a / "steps.jsonl"), _jsonl(b / "steps.jsonl"), "steps")
    _close(_jsonl(a / "prompts.jsonl"), _jsonl(b / "prompts.jsonl"), "prompts")
    wa, wb = load_file(a / "model" / "model.safetensors"), load_file(b / "model" / "model.safetensors")
    assert set(wa) == set(wb)
    worst = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    assert worst <= TOL, worst


def run_two_ranks(script_text: str, tmp_path: Path, timeout: int = 120) -> list[dict]:
    """Run ``script_text`` as 2 gloo ranks (RANK/WORLD_SIZE/MASTER_* set, argv[1] = tmp_path)
    and return what each rank dumped into ``tmp_path/rank<r>.json``."""
    script = tmp_path / "ranks.py"
    script.write_text(script_text)
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path)], stderr=subprocess.PIPE, text=True,
                              env={**_env(), "RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r),
                                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
             for r in (0, 1)]
    errs = [p.communicate(timeout=timeout)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
