"""Write faults for the other writers (issue 34.3), each under a real limit: the tokenizer save,
dvclive, metrics.json and the manifest, SFT's model folder, the evaluation's metrics.json, the
report's tables, summary.json and figures; then a full tmpfs (ENOSPC) and a read-only one
(EROFS). (EACCES needs another user than root, which reads no repository here: the errno is
handled with the others, store.atomic._DISK_ERRNOS.) Writers that a training run reaches only after a bigger file (the tokenizer after the
weights, dvclive after steps.jsonl) are driven directly in a child under the limit."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from replication.__main__ import main
from replication.train.checkpoint import load_checkpoint, save_checkpoint

from faults.cli_helpers import one_line_error, train_args
from faults.write_limits import leftovers, run_cli_limited, run_python, small_tmpfs

_ONE_LINE = """
    import sys
    from replication.store import DiskFull, ignore_file_size_signal
    ignore_file_size_signal()  # as the CLI does
    try:
        write()
    except DiskFull as e:
        print(e.strerror)
        sys.exit(1)
    """


def _driven(body: str, *, cwd: Path, limit: int | None = None) -> str:
    """Run ``body`` (defining ``write()``) in a child under the limit; the DiskFull line it ended in."""
    proc = run_python(textwrap.dedent(body) + textwrap.dedent(_ONE_LINE), cwd=cwd, limit=limit)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    line = proc.stdout.strip()
    assert "\n" not in line and line.startswith("cannot write") and "MiB free" in line, line
    return line


@pytest.fixture(scope="module")
def finished(small_overrides, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("writers") / "run"
    assert main(train_args(small_overrides, out, "--max-steps", "2")) == 0
    return out


def test_tokenizer_save_under_a_file_size_limit(finished, tmp_path):
    """The trainer's model save with the tokenizer failing (the weights fit): the old folder stays."""
    dest = tmp_path / "model"
    shutil.copytree(finished / "model", dest)
    before = sorted(p.name for p in dest.iterdir())
    limit = (dest / "tokenizer.json").stat().st_size // 2
    line = _driven(f"""
        from types import SimpleNamespace
        from replication.models.loading import load_policy
        from replication.train.components import Components
        from replication.train.distributed import World
        model, tok = load_policy({str(dest)!r})
        small = SimpleNamespace(save_pretrained=lambda d, **kw: open(f"{{d}}/config.json", "w").write("{{}}"))
        def write():
            Components.save_model(SimpleNamespace(world=World(), model=small, tokenizer=tok), {str(dest)!r})
        """, cwd=tmp_path, limit=limit)
    assert f"{dest}/tokenizer" in line and "file-size limit" in line, line
    assert sorted(p.name for p in dest.iterdir()) == before and leftovers(tmp_path) == []


def test_dvclive_under_a_file_size_limit_then_rebuilt(tmp_path):
    """dvclive's summary outgrows the limit: one line naming its file; a resumed log rebuilds
    the folder from steps.jsonl."""
    run = tmp_path / "run"
    run.mkdir()
    line = _driven(f"""
        import resource
        from pathlib import Path
        from replication.train.run_log import RunLog
        row = {{"step": 0, "reward": 0.5, "accuracy": 0.25, "zero_variance_frac": 0.125,
               "grad_norm": 1.5, "entropy": 2.5, "clipfrac": 0.0, "step_seconds": 0.1}}
        log = RunLog(Path({str(run)!r}), resume_step=None)
        log.log_step(row, [])
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        def write():
            log._to_live({{**row, "step": 1}})
        """, cwd=tmp_path)
    assert f"{run}/dvclive/" in line and "file-size limit 64 bytes" in line, line
    proc = run_python(f"""
        from pathlib import Path
        from replication.train.run_log import RunLog
        RunLog(Path({str(run)!r}), resume_step=0).close()
        """, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((run / "dvclive" / "metrics.json").read_text())["step"] == 0


def test_metrics_and_manifest_under_a_file_size_limit(finished, tmp_path):
    """finish_run: metrics.json whole or absent; no manifest, so the run is not taken as done."""
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    metrics = json.loads((out / "metrics.json").read_text())
    for name in ("metrics.json", "MANIFEST.json"):
        (out / name).unlink()
    line = _driven(f"""
        import json
        from replication.train.run_folder import finish_run
        def write():
            finish_run({str(out)!r}, json.loads({json.dumps(json.dumps(metrics))}))
        """, cwd=tmp_path, limit=len(json.dumps(metrics)) // 2)
    assert f"{out}/metrics.json" in line, line
    assert not (out / "metrics.json").exists() and not (out / "MANIFEST.json").exists()
    assert leftovers(out) == []


def test_sft_under_a_file_size_limit_then_rerun(tmp_path):
    """SFT's weights outgrow the limit: nothing half-written in --out, and a re-run fills it."""
    out = tmp_path / "base"
    args = ("sft", "--profile", "smoke", "--out", str(out), "--steps", "2")
    proc = run_cli_limited(*args, limit=500_000, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    one_line_error(proc.stderr, f"{out}/model.safetensors", "file-size limit", "MiB free")
    assert list(out.iterdir()) == [] and leftovers(tmp_path) == []
    assert run_cli_limited(*args, limit=None, cwd=tmp_path).returncode == 0
    assert {"model.safetensors", "tokenizer.json", "sft_report.json"} <= {p.name for p in out.iterdir()}


def test_eval_metrics_under_a_file_size_limit(small_overrides, finished, tmp_path):
    out = tmp_path / "eval"
    args = ["eval", "--profile", "default", "--checkpoint", str(finished / "model"), "--out", str(out),
            "--seed", "0"]
    for k, v in small_overrides.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    proc = run_cli_limited(*args, limit=200, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    one_line_error(proc.stderr, f"{out}/metrics.json", "file-size limit", "MiB free")
    assert not (out / "metrics.json").exists() and leftovers(out) == []


@pytest.mark.parametrize("writer, name", [
    ("write_tables({'t': frame}, folder)", "t.csv"),
    ("write_summary_json(frame.iloc[:0], folder / 'summary.json', profile='p' * 400, seeds=[0])",
     "summary.json"),
    ("save(figure, folder / 'f.png')", "f.png"),
])
def test_report_writers_under_a_file_size_limit(tmp_path, writer, name):
    folder = tmp_path / "tables"
    line = _driven(f"""
        from pathlib import Path
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import pandas as pd
        from replication.report.plots import save
        from replication.report.tables import write_summary_json, write_tables
        folder = Path({str(folder)!r})
        frame = pd.DataFrame({{"arm": ["vip"] * 50, "value": range(50)}})
        figure = plt.figure()
        figure.gca().plot(range(50))
        def write():
            {writer}
        """, cwd=tmp_path, limit=100)
    assert f"{folder}/{name}" in line, line
    assert not (folder / name).exists() and leftovers(tmp_path) == []


def test_disk_full_on_a_small_tmpfs_then_resume(small_overrides, finished, tmp_path):
    """A real full disk: the checkpoint does not fit; one line with the free space, its temporary
    folder removed (the space comes back), the earlier checkpoint kept; resumable elsewhere."""
    disk = tmp_path / "disk"
    size = (finished / "checkpoint" / "state.pt").stat().st_size
    # the run's last checkpoint holds no optimizer state (train/loop.py): its size, measured by
    # writing the step-2 state without it, sets how little room is left
    probe = tmp_path / "probe"
    state = load_checkpoint(finished)
    state["components"]["optimizer"] = None
    save_checkpoint(probe, state)
    last = (probe / "checkpoint" / "state.pt").stat().st_size
    with small_tmpfs(disk, f"{size + last // 2}"):
        out = disk / "run"
        shutil.copytree(finished, out, ignore=shutil.ignore_patterns("model", "metrics.json", "MANIFEST.json"))
        proc = run_cli_limited(*train_args(small_overrides, out, "--resume"), limit=None, cwd=tmp_path)
        assert proc.returncode == 1, proc.stderr
        one_line_error(proc.stderr, f"{out}/.checkpoint.tmp/state.pt", "No space left", "MiB free on")
        assert leftovers(out) == [] and shutil.disk_usage(disk).free > last // 3
        kept = tmp_path / "kept"
        shutil.copytree(out, kept)
    assert main(train_args(small_overrides, kept, "--resume")) == 0


def test_read_only_disk_is_one_line(finished, tmp_path):
    """EROFS (a disk remounted read-only, as the kernel does after I/O errors) is the same one
    line naming the file, and the file there before is kept."""
    disk = tmp_path / "disk"
    with small_tmpfs(disk, "1m"):
        (disk / "config.json").write_text("{}")
        got = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True, text=True)
        if got.returncode != 0:
            pytest.skip(f"cannot remount read-only: {got.stderr.strip()}")
        line = _driven(f"""
            from replication.store import write_atomic
            def write():
                write_atomic({str(disk / "config.json")!r}, "{{'a': 1}}")
            """, cwd=tmp_path)
        assert f"{disk}/config.json" in line and "Read-only file system" in line, line
        assert (disk / "config.json").read_text() == "{}"
