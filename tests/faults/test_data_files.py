"""Fault injection (issue 11), data files: null or empty cells, missing columns and malformed,
empty or unsupported files are one line naming the file (and the row)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faults.cli_helpers import one_line_error, run_cli


def _math_train_args(tmp_path: Path, path: Path) -> list[str]:
    opts = json.dumps({"train": "math500", "train_path": str(path)})
    return ["train", "--profile", "default", "--seed", "0", "--out", str(tmp_path / "out"),
            "--set", "task.kind=math", "--set", f"task.options={opts}"]


@pytest.mark.parametrize("name, content, needles", [
    ("null.jsonl", '{"problem": "1+1", "answer": "2"}\n{"problem": "2+2", "answer": null}\n', ["row 1", "answer"]),
    ("empty_answer.jsonl", '{"problem": "1+1", "answer": "  "}\n', ["row 0", "empty"]),
    ("nocol.jsonl", '{"problem": "1+1", "solution": "2"}\n', ["row 0", "columns"]),
    ("bad.jsonl", '{"problem": "1+1", "answer": "2"}\n{"problem": \n', ["malformed"]),
    ("empty.jsonl", "", ["empty file"]),
    ("blank.jsonl", "\n\n", ["no rows"]),
    ("header.csv", "problem,answer\n", ["no rows"]),
    ("bad.json", "[{", ["malformed"]),
    ("data.txt", "x", ["unsupported"]),
])
def test_bad_data_files_name_file_and_row(tmp_path, name, content, needles):
    from replication.tasks.data_errors import DataError
    from replication.tasks.math_datasets import load_math_dataset

    f = tmp_path / name
    f.write_text(content)
    with pytest.raises(DataError) as e:
        load_math_dataset("math500", path=str(f))
    msg = str(e.value)
    assert str(f) in msg and "\n" not in msg
    for n in needles:
        assert n in msg


def test_null_answer_in_parquet_is_an_error_not_nan(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    from replication.tasks.data_errors import DataError
    from replication.tasks.math_datasets import load_math_dataset

    f = tmp_path / "t.parquet"
    pd.DataFrame({"problem": ["a", "b"], "answer": [1.0, float("nan")]}).to_parquet(f)
    with pytest.raises(DataError, match="row 1"):
        load_math_dataset("math500", path=str(f))


def test_bad_data_through_the_cli_is_one_line(tmp_path):
    f = tmp_path / "train.jsonl"
    f.write_text('{"problem": "1+1", "answer": null}\n')
    r = run_cli(*_math_train_args(tmp_path, f))
    assert r.returncode == 2
    one_line_error(r.stderr, str(f), "row 0")
