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


def test_one_code_digest_serves_the_run_cache_and_the_base_model(tmp_path):
    """Both keys hash with replication.code_digest: path, NUL, bytes per file, in the order the
    caller gives (the base model's committed BASE_KEY depends on that exact byte sequence)."""
    import hashlib

    from replication.code_digest import code_digest
    from replication.orchestration import base_model

    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_bytes(b"x")
    (tmp_path / "sub" / "b.py").write_bytes(b"y")
    (tmp_path / "sub" / "__pycache__").mkdir()
    (tmp_path / "sub" / "__pycache__" / "c.py").write_bytes(b"ignored")
    expect = lambda *parts: hashlib.sha256(b"".join(parts)).hexdigest()[:16]  # noqa: E731
    assert code_digest(tmp_path) == expect(b"a.py\0x", b"sub/b.py\0y")
    assert code_digest(tmp_path, include=("sub", "a.py")) == expect(b"sub/b.py\0y", b"a.py\0x")
    assert code_digest(tmp_path, exclude=("sub",)) == expect(b"a.py\0x")
    assert run_cache.code_digest() == code_digest(run_cache.PACKAGE, exclude=run_cache.NOT_TRAINING)
    assert base_model._code_digest() == code_digest(base_model.PACKAGE, include=base_model.CODE)
