"""Bad input refused before compute (issue 18.8), data side: a prompt longer than the model's
context, duplicate prompt ids, a symlink loop in a data folder. Each is one ``error:`` line
(exit 2) naming the file (and row or ids), before the model weights are loaded."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from replication.__main__ import main
from replication.tasks.data_errors import DataError
from replication.tasks.math_datasets import load_math_dataset

from faults.cli_helpers import one_line_error, run_cli, train_args

pytest.importorskip("math_verify")  # task.kind: math scores with math-verify


def _math_args(small_overrides: dict, out: Path, path: Path, **extra) -> list[str]:
    opts = {"train": "math500", "train_path": str(path), "template": "raw", **extra}
    return train_args(small_overrides, out, overrides={"task.kind": "math", "task.options": opts,
                                                       "rollout.prompts_per_step": 4})


def _write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _rows(n: int, start: int = 0) -> list[dict]:
    return [{"id": i, "problem": f"{i}+1=", "answer": str(i + 1)} for i in range(start, start + n)]


# ---------------------------------------------------------------------------- model context


def test_prompt_longer_than_the_context_names_file_row_and_lengths(small_overrides, tmp_path, capsys,
                                                                   monkeypatch):
    """Before: generation tried to allocate for a 1 MB prompt. Now the tokenizer alone measures it
    (the tiny model's max_position_embeddings is 64) and the weights are never loaded."""
    import replication.train.components as components

    from transformers import AutoTokenizer

    rows = _rows(8)
    rows[5]["problem"] = "1+" * 40 + "1="  # 81 characters of a character-level vocabulary
    n_tokens = len(AutoTokenizer.from_pretrained(small_overrides["model.path"])(rows[5]["problem"])["input_ids"])
    assert n_tokens > 64
    f = _write_rows(tmp_path / "train.jsonl", rows)
    monkeypatch.setattr(components, "load_model", lambda cfg: pytest.fail("the model was loaded"))
    out = tmp_path / "run"
    assert main(_math_args(small_overrides, out, f)) == 2
    one_line_error(capsys.readouterr().err, f"{f} row 5", "'math500/5'", f"{n_tokens} tokens",
                   "max_position_embeddings=64")
    assert not (out / "config.json").exists()


def test_prompts_that_fit_pass_the_context_check(small_overrides, tmp_path):
    from replication.config import load_profile
    from replication.tasks.data import build_data
    from replication.tasks.input_checks import check_prompt_context

    f = _write_rows(tmp_path / "train.jsonl", _rows(8))
    cfg = load_profile("default", {**small_overrides, "task.kind": "math",
                                   "task.options": {"train": "math500", "train_path": str(f),
                                                    "template": "raw"}})
    check_prompt_context(cfg, build_data(cfg))  # raises on a prompt that does not fit


# ---------------------------------------------------------------------------- duplicate ids


def test_duplicate_ids_name_the_file_rows_and_ids(tmp_path):
    rows = _rows(4) + [{"id": 2, "problem": "9+9=", "answer": "18"}, {"id": 3, "problem": "3+1=", "answer": "4"}]
    f = _write_rows(tmp_path / "dup.jsonl", rows)
    with pytest.raises(DataError) as e:
        load_math_dataset("math500", path=str(f), template="raw")
    msg = str(e.value)
    assert "\n" not in msg
    for needle in ("duplicate prompt ids", "'math500/2'", "'math500/3'", f"{f} row 2", f"{f} row 4"):
        assert needle in msg, (needle, msg)


def test_duplicate_ids_across_files_of_a_folder_through_the_cli(small_overrides, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    _write_rows(data / "a.jsonl", _rows(4))
    _write_rows(data / "b.jsonl", _rows(4, start=3))  # id 3 again
    r = run_cli(*_math_args(small_overrides, tmp_path / "run", data))
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr, "'math500/3'", f"{data / 'a.jsonl'} row 3", f"{data / 'b.jsonl'} row 0")


# ---------------------------------------------------------------------------- symlink loops


def test_symlink_loop_in_a_data_folder_is_one_line(small_overrides, tmp_path, capsys):
    """Before: glob's ** followed the loop about 40 levels deep and read every file 41 times."""
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    _write_rows(data / "sub" / "train.jsonl", _rows(8))
    os.symlink("..", data / "sub" / "back")
    with pytest.raises(DataError, match="symlink loop") as e:
        load_math_dataset("math500", path=str(data))
    assert str(data / "sub" / "back") in str(e.value) and str(data) in str(e.value)
    assert main(_math_args(small_overrides, tmp_path / "run", data)) == 2
    one_line_error(capsys.readouterr().err, str(data / "sub" / "back"), "symlink loop")


def test_a_symlinked_folder_that_is_no_loop_is_read_once(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _write_rows(elsewhere / "train.jsonl", _rows(5))
    data = tmp_path / "data"
    data.mkdir()
    os.symlink(elsewhere, data / "linked")
    (data / ".hidden").mkdir()
    _write_rows(data / ".hidden" / "skip.jsonl", _rows(3, start=50))  # hidden folders are skipped
    items = load_math_dataset("math500", path=str(data), template="raw")
    assert [p.id for p in items] == [f"math500/{i}" for i in range(5)]
    assert items[0].origin == f"{data / 'linked' / 'train.jsonl'} row 0"
