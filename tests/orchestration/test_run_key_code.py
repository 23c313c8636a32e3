"""The run cache key includes the code that produces a run (issue 9.3)."""

from __future__ import annotations

import shutil

from replication.orchestration import run_cache


def test_editing_a_training_source_changes_the_code_digest_and_report_edits_do_not(tmp_path):
    pkg = tmp_path / "replication"
    shutil.copytree(run_cache.PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    before = run_cache.code_digest(pkg)
    assert before == run_cache.code_digest(run_cache.PACKAGE)  # same bytes, same digest
    (pkg / "report" / "tables.py").write_text((pkg / "report" / "tables.py").read_text() + "\n# note\n")
    assert run_cache.code_digest(pkg) == before  # report/ only reads finished runs
    loop = pkg / "train" / "loop.py"
    loop.write_text(loop.read_text().replace("allocator_seconds", "allocator_secs", 1))
    assert run_cache.code_digest(pkg) != before


def test_run_key_changes_with_the_code_digest(monkeypatch):
    over = {"model.path": "no-such-model"}
    monkeypatch.setattr(run_cache, "code_digest", lambda root=None: "aaaa")
    k1, _ = run_cache.run_key("smoke", over, 0, 3)
    assert run_cache.run_key("smoke", over, 0, 3)[0] == k1
    monkeypatch.setattr(run_cache, "code_digest", lambda root=None: "bbbb")
    assert run_cache.run_key("smoke", over, 0, 3)[0] != k1
