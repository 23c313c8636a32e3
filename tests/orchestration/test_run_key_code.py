"""The run key covers every input that changes a run's numbers and nothing that cannot (issue 34.1):
comment, docstring and formatting edits leave it as it is; code, command, named-file content and
hub revision edits change it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from replication.code_digest import code_digest, normalized_source
from replication.orchestration import run_cache
from replication.store import run_key as rk


@pytest.fixture()
def pkg(tmp_path) -> Path:
    pkg = tmp_path / "replication"
    shutil.copytree(run_cache.PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return pkg


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_comments_docstrings_and_formatting_leave_the_training_code_digest(pkg):
    before = run_cache.code_digest(pkg)
    assert before == run_cache.code_digest(run_cache.PACKAGE)
    vip = pkg / "allocation" / "vip.py"
    vip.write_text(vip.read_text() + "\n# a comment added to replication/allocation/vip.py\n")
    assert run_cache.code_digest(pkg) == before
    _edit(vip, '"""', '"""An edited docstring. ')  # the module docstring
    assert run_cache.code_digest(pkg) == before
    loop = pkg / "train" / "loop.py"
    loop.write_text(loop.read_text().replace("    ", "    ", 1).replace(", ", " ,  ", 3))  # spacing only
    assert run_cache.code_digest(pkg) == before
    (pkg / "report" / "tables.py").write_text((pkg / "report" / "tables.py").read_text() + "\nX = 1\n")
    assert run_cache.code_digest(pkg) == before  # report/ never runs inside training


def test_a_code_edit_changes_the_training_code_digest(pkg):
    before = run_cache.code_digest(pkg)
    loop = pkg / "train" / "loop.py"
    loop.write_text(loop.read_text() + "\nEXTRA_CONSTANT = 1\n")
    assert run_cache.code_digest(pkg) != before
    after_constant = run_cache.code_digest(pkg)
    loop.write_text(loop.read_text().replace("EXTRA_CONSTANT = 1", "EXTRA_CONSTANT = 2"))
    assert run_cache.code_digest(pkg) not in (before, after_constant)  # a literal counts


def test_normalized_source_keeps_structure_and_drops_bare_strings():
    a = 'def f(x):\n    """doc"""\n    # why\n    return x + 1\n'
    b = "def f( x ):\n\n    return x+1   # other comment\n"
    assert normalized_source(a) == normalized_source(b)
    assert normalized_source(a) != normalized_source("def f(x):\n    return x + 2\n")
    # indentation is structure: the same tokens at another depth are other code
    assert normalized_source("if a:\n    b()\nc()\n") != normalized_source("if a:\n    b()\n    c()\n")
    # a string that is a value is code; only a string that is a whole statement is dropped
    assert normalized_source('x = "a"\n') != normalized_source('x = "b"\n')


def _pythons() -> list[Path]:
    found = sorted(Path.home().glob(".pyenv/versions/3.1[0-9]*/bin/python3"))
    return [p for p in found if p.exists()]


@pytest.mark.skipif(len(_pythons()) < 2, reason="fewer than two Python versions installed (pyenv)")
def test_the_code_digest_is_the_same_under_every_python_version():
    """code_digest.py needs only the standard library: run it as a file under each Python."""
    script = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('cd', sys.argv[1]); "
              "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
              "print(m.training_code_digest(sys.argv[2]))")
    src = Path(run_cache.PACKAGE) / "code_digest.py"
    digests = {py.parent.parent.name: subprocess.run([str(py), "-c", script, str(src), str(run_cache.PACKAGE)],
                                                     capture_output=True, text=True, check=True).stdout.strip()
               for py in _pythons()}
    assert len(set(digests.values())) == 1, digests


OVER = {"model.path": "no-such-model"}


def test_run_key_changes_with_the_code_digest(monkeypatch):
    monkeypatch.setattr(run_cache, "code_digest", lambda root=None: "aaaa")
    k1, _ = run_cache.run_key("smoke", OVER, 0, 3)
    assert run_cache.run_key("smoke", OVER, 0, 3)[0] == k1
    monkeypatch.setattr(run_cache, "code_digest", lambda root=None: "bbbb")
    assert run_cache.run_key("smoke", OVER, 0, 3)[0] != k1


def test_run_key_changes_with_the_command_the_grid_builds(monkeypatch):
    """An edit to the code that builds the training command changes the key through the command."""
    k1, rec = run_cache.run_key("smoke", OVER, 0, 3)
    assert rec["inputs"]["command"][0] == "train" and "--out" not in rec["inputs"]["command"]
    real = run_cache.train_command

    def with_extra_flag(*a, **kw):
        return real(*a, **kw) + ["--estimator", "rloo"]

    monkeypatch.setattr(run_cache, "train_command", with_extra_flag)
    assert run_cache.run_key("smoke", OVER, 0, 3)[0] != k1


def test_placement_flags_do_not_enter_the_command():
    cmd = run_cache.train_command("smoke", {"a.b": 1}, 3, 5, Path("/x/run"), resume=True)
    torchrun = ["torchrun", "--nproc_per_node", "2", "--rdzv-endpoint", "h:29500", *cmd[1:]]
    assert rk.normalized_command(cmd) == rk.normalized_command(torchrun)
    assert rk.normalized_command(cmd) == rk.normalized_command(
        run_cache.train_command("smoke", {"a.b": 1}, 3, 5, Path("/elsewhere"), resume=False))
    assert rk.normalized_command(cmd) == ["train", "--profile", "--seed", "3", "--set", "a.b=1", "--max-steps", "5"]


def test_run_key_follows_the_content_of_named_files(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights-1")
    (model / "sft_report.json").write_text("{}")
    over = {"model.path": str(model)}
    k1, rec = run_cache.run_key("smoke", over, 0, 3, rk.FileDigests())
    assert rec["inputs"]["inputs"]["model.path"] != "missing"
    (model / "sft_report.json").write_text('{"wall_seconds": 3}')  # a report beside the model
    assert run_cache.run_key("smoke", over, 0, 3, rk.FileDigests())[0] == k1
    (model / "model.safetensors").write_bytes(b"weights-2")  # new weights at the same path
    assert run_cache.run_key("smoke", over, 0, 3, rk.FileDigests())[0] != k1


def test_a_grid_hashes_each_named_file_once(tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"w")
    opened = []
    real_open = open

    def counting_open(f, *a, **kw):
        if str(f).endswith("model.safetensors"):
            opened.append(f)
        return real_open(f, *a, **kw)

    monkeypatch.setattr("builtins.open", counting_open)
    digests = rk.FileDigests()
    for seed in range(4):
        run_cache.run_key("smoke", {"model.path": str(model)}, seed, 3, digests)
    assert len(opened) == 1


def test_data_files_named_by_path_enter_the_key(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text('{"q": 1}\n')
    cfg = {"task": {"kind": "math", "options": {"train": "dapo17k", "train_path": str(data),
                                                "eval": ["aime24"], "eval_paths": {"aime24": str(data)}}},
           "model": {"path": "Qwen/Qwen2.5-Math-1.5B"}}
    first = rk.input_digests(cfg, rk.FileDigests())
    assert set(first) == {"task.options.train_path", "task.options.eval_paths.aime24"}
    data.write_text('{"q": 2}\n')
    assert rk.input_digests(cfg, rk.FileDigests()) != first


def test_hub_ids_enter_by_revision(tmp_path):
    cfg = {"model": {"path": "Qwen/Qwen2.5-Math-1.5B"},
           "task": {"kind": "math", "options": {"train": "dapo17k", "eval": ["aime24"],
                                                "eval_paths": {}}}}
    none = {"models": {}, "datasets": {}}
    revs = rk.hub_revisions(cfg, none)
    assert revs == {"dataset:BytedTsinghua-SIA/DAPO-Math-17k": "unpinned", "dataset:HuggingFaceH4/aime_2024": "unpinned",
                    "model:Qwen/Qwen2.5-Math-1.5B": "unpinned"}
    lock = {"models": {"Qwen/Qwen2.5-Math-1.5B": "abc123"}, "datasets": {}}
    assert rk.hub_revisions(cfg, lock)["model:Qwen/Qwen2.5-Math-1.5B"] == "abc123"
    lock_file = tmp_path / "hub.lock.json"
    lock_file.write_text(json.dumps(lock))
    assert rk.read_hub_lock(lock_file)["models"] == lock["models"]
    base = rk.key_record(config=cfg, steps=1, command=["train"], shape={}, code="c", inputs={},
                         revisions=rk.hub_revisions(cfg, none))
    pinned = rk.key_record(config=cfg, steps=1, command=["train"], shape={}, code="c", inputs={},
                           revisions=rk.hub_revisions(cfg, lock))
    assert base["key"] != pinned["key"]


def test_one_code_digest_serves_the_run_cache_and_the_base_model(tmp_path):
    from replication.orchestration import base_model

    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_text("x = 1  # c\n")
    (tmp_path / "sub" / "b.py").write_text('"""doc"""\ny = 2\n')
    (tmp_path / "sub" / "__pycache__").mkdir()
    (tmp_path / "sub" / "__pycache__" / "c.py").write_text("ignored = 1\n")
    whole = code_digest(tmp_path)
    assert code_digest(tmp_path, include=("a.py", "sub")) == whole
    assert code_digest(tmp_path, include=("sub", "a.py")) != whole  # order is the caller's
    assert code_digest(tmp_path, exclude=("sub",)) != whole
    (tmp_path / "a.py").write_text("x = 1\n")
    assert code_digest(tmp_path) == whole
    assert run_cache.code_digest() == code_digest(run_cache.PACKAGE, exclude=run_cache.NOT_TRAINING)
    assert base_model._code_digest() == code_digest(base_model.PACKAGE, include=base_model.CODE)
