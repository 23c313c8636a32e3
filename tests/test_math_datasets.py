"""Hub math dataset loaders, on small local fixtures in the hubs' own layouts (no network)."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

from replication.tasks import math_datasets as md
from replication.tasks import math_hub
from replication.tasks.math_datasets import (
    DatasetUnavailableError,
    MathDatasetConfig,
    load_math_dataset,
)

FIX = Path(__file__).parent / "fixtures" / "math"
HAVE_PARQUET = any(importlib.util.find_spec(m) for m in ("pyarrow", "fastparquet"))
needs_parquet = pytest.mark.skipif(
    not HAVE_PARQUET, reason="reading .parquet fixtures needs pyarrow (comes with the math extra: "
                             "pip install -e '.[math]')")


@needs_parquet
def test_dapo17k_dedupes_strips_wrapper_and_uses_uuid_ids():
    items = load_math_dataset("dapo17k", path=str(FIX / "dapo17k"))
    assert [p.question for p in items] == ["What is $3+4$?", "Compute $2^{10}$.",
                                           "Find $x$ if $2x+1=9$."]
    assert [p.answer for p in items] == ["7", "1024", "4"]
    assert items[0].id == "dapo17k/uuid-0-0"  # first occurrence kept, as VIP's dedupe
    assert items[0].source == "dapo17k"
    # default template for DAPO is its own wrapper (DynaMO trains on the parquet prompt as is)
    assert items[0].prompt == md.DAPO_PREFIX + "What is $3+4$?" + md.DAPO_SUFFIX
    assert items[0].text == items[0].prompt


@needs_parquet
def test_dapo17k_vip_template_is_four_shot_answer_line():
    items = load_math_dataset("dapo17k", path=str(FIX / "dapo17k" / "data" /
                                                  "dapo-math-17k.parquet"), template="vip_4shot")
    p = items[1].prompt
    assert p.count("Example question") == 4
    assert "Current question: Compute $2^{10}$.\n\nResponse:\n" in p
    assert "\\boxed{}" in p and "\x08" not in p  # VIP's accidental backspace is not reproduced
    assert md.get_template("vip_4shot").answer_format == "answer_line"


@needs_parquet
def test_open_r1_processed_picks_config_folder_and_gdro_template():
    items = load_math_dataset("dapo17k_en", path=str(FIX / "dapo17k_en"))
    assert [p.answer for p in items] == ["7", "1024"]  # the en/ folder only
    assert items[0].prompt == "What is $3+4$? " + md.BOXED_INSTRUCTION
    cn = load_math_dataset("dapo17k_en", path=str(FIX / "dapo17k_en"), hub_config="cn")
    assert len(cn) == 1 and cn[0].answer == "2"


def test_math500_jsonl():
    items = load_math_dataset("math500", path=str(FIX / "math500_test.jsonl"), template="raw")
    assert [p.id for p in items] == ["math500/test/prealgebra/1.json", "math500/test/algebra/2.json",
                                     "math500/test/prealgebra/3.json"]
    assert items[0].answer == "\\frac{3}{4}" and items[0].prompt == "Simplify $\\frac{6}{8}$."


@needs_parquet
def test_aime_variants():
    a24 = load_math_dataset("aime24", path=str(FIX / "aime_2024"))
    assert [(p.id, p.answer) for p in a24] == [("aime24/60", "2"), ("aime24/61", "9")]
    assert a24[0].prompt.endswith("\\boxed{}.")
    dapo_copy = load_math_dataset("aime24_dapo", path=str(FIX / "aime-2024.parquet"))
    assert len(dapo_copy) == 2  # 2 problems x 4 repeats, deduplicated
    a25 = load_math_dataset("aime25", path=str(FIX / "aime25.parquet"), template="qwen_boxed")
    assert [p.answer for p in a25] == ["51", "99"]  # int64 column -> "51"
    assert a25[0].prompt.endswith("within \\boxed{}.")


@needs_parquet
def test_amc_float_answers():
    amc = load_math_dataset("amc23", path=str(FIX / "amc23_test.parquet"))
    assert [p.answer for p in amc] == ["27", "0.5"]  # float 27.0 -> "27"


def test_minerva_olympiad():
    minerva = load_math_dataset("minerva", path=str(FIX / "minerva_test.jsonl"))
    assert [p.answer for p in minerva] == ["20", "9"]
    assert minerva[0].id == "minerva/0"  # no id column: row index
    oly = load_math_dataset("olympiadbench", path=str(FIX / "olympiadbench_test.jsonl"))
    assert [p.answer for p in oly] == ["$-2$, $2$", "$6$"]
    assert oly[1].id == "olympiadbench/1607"


def test_gpqa_choices_are_seeded_and_answer_is_the_right_letter():
    a = load_math_dataset("gpqa_diamond", path=str(FIX / "gpqa_diamond.csv"))
    b = load_math_dataset("gpqa_diamond", path=str(FIX / "gpqa_diamond.csv"))
    assert [p.prompt for p in a] == [p.prompt for p in b]
    for p, correct in zip(a, ("Nitrogen", "Negative")):
        assert p.answer in "ABCD"
        assert f"\n{p.answer}: {correct}\n" in p.prompt + "\n"
        assert "only provide the letter" in p.prompt
    from_folder = load_math_dataset("gpqa_diamond", path=str(FIX))  # file named after the config
    assert [p.prompt for p in from_folder] == [p.prompt for p in a]
    seeds = {tuple(p.answer for p in load_math_dataset(
        "gpqa_diamond", path=str(FIX / "gpqa_diamond.csv"), seed=s)) for s in range(12)}
    assert len(seeds) > 1  # the seed moves the correct option


@needs_parquet
def test_limit_and_unknown_names():
    assert len(load_math_dataset("dapo17k", path=str(FIX / "dapo17k"), limit=2)) == 2
    with pytest.raises(ValueError, match="unknown dataset"):
        load_math_dataset("nope", path=str(FIX))
    with pytest.raises(ValueError, match="unknown prompt template"):
        load_math_dataset("math500", path=str(FIX / "math500_test.jsonl"), template="nope")
    with pytest.raises(FileNotFoundError):
        load_math_dataset("math500", path=str(FIX / "missing.jsonl"))


def test_every_registered_dataset_has_a_fixture_and_a_known_template():
    fixtures = {"dapo17k": "dapo17k", "dapo17k_en": "dapo17k_en",
                "math500": "math500_test.jsonl", "aime24": "aime_2024",
                "aime24_dapo": "aime-2024.parquet", "aime25": "aime25.parquet",
                "amc23": "amc23_test.parquet", "minerva": "minerva_test.jsonl",
                "olympiadbench": "olympiadbench_test.jsonl", "gpqa_diamond": "gpqa_diamond.csv"}
    assert set(fixtures) == set(md.list_datasets())
    for name, rel in fixtures.items():
        if not HAVE_PARQUET and not rel.endswith((".jsonl", ".csv")):
            continue
        items = load_math_dataset(name, path=str(FIX / rel))
        assert items and all(p.answer and p.prompt and p.id.startswith(name + "/") for p in items)
        assert len({p.id for p in items}) == len(items)


def test_offline_by_env_fails_fast_with_the_override_named(monkeypatch, tmp_path):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(math_hub, "hub_reachable", lambda timeout_s: pytest.fail("probed the network"))
    start = time.monotonic()
    with pytest.raises(DatasetUnavailableError) as err:
        load_math_dataset("amc23")
    assert time.monotonic() - start < 30
    msg = str(err.value)
    assert "amc23" in msg and "math-ai/amc23" in msg and "path=" in msg


def test_unreachable_hub_fails_before_touching_datasets(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    calls = []
    monkeypatch.setattr(math_hub, "hub_reachable", lambda timeout_s: calls.append(timeout_s) or False)
    monkeypatch.setattr(math_hub, "_require_datasets", lambda what: pytest.fail("datasets was used"))
    with pytest.raises(DatasetUnavailableError, match="unreachable.*path=DIR"):
        load_math_dataset(MathDatasetConfig(name="aime24", probe_timeout_s=0.5))
    assert calls == [0.5]


def test_missing_datasets_package_gives_install_hint(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_datasets(name, *args, **kwargs):
        if name == "datasets":
            raise ImportError("no datasets")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_datasets)
    with pytest.raises(ImportError, match=r"pip install -e '\.\[math\]'"):
        math_hub._require_datasets("x")


# -- CHAMP (PyPI champ-dataset) ------------------------------------------------------------------

from replication.tasks import champ  # noqa: E402

needs_champ = pytest.mark.skipif(
    importlib.util.find_spec("champ_dataset") is None,
    reason="needs the PyPI package champ-dataset (pip install champ-dataset==1.0.0)")


@pytest.mark.parametrize("raw, cleaned, kind", [
    ("239", "239", "integer"),
    ("0 is the only possible value", "0", "integer"),
    ("98 values", "98", "integer"),
    ("100 (i.e., all values)", "100", "integer"),
    ("2*C(10, 5), or equivalently 504", "504", "integer"),
    ("sum_(i=1)^n i^2, or equivalently n(n+1)(2n+1)/6", "n(n+1)(2n+1)/6", "expression"),
    ("The limit exists and is equal to 2/3", "2/3", "expression"),
    ("C(n+1, 2m+1)", "C(n+1, 2m+1)", "expression"),
    ("No", "No", "yes_no"),
    ("x=16 and x=81", "x=16 and x=81", "text"),
    ("The limit does not exist", "The limit does not exist", "text"),
])
def test_champ_answer_cleaning(raw, cleaned, kind):
    assert champ.clean_answer(raw) == cleaned
    assert champ.answer_kind(cleaned) == kind


def test_champ_ascii_to_latex():
    assert champ.ascii_to_latex("n(n+1)*2^(n-2)") == "n(n+1) \\cdot 2^{n-2}"
    assert champ.ascii_to_latex("(1+sqrt(4a+1))/2") == "(1+\\sqrt{4a+1})/2"
    assert champ.ascii_to_latex("C(n+1, 2m+1)") == "\\binom{n+1}{2m+1}"
    assert champ.ascii_to_latex("2^floor(n/2)") == "2^{\\lfloor n/2 \\rfloor}"


@needs_champ
def test_champ_loads_offline_in_the_common_schema():
    counts = champ.champ_kind_counts()
    assert sum(counts.values()) == 270
    items = champ.load_champ()
    assert len(items) == counts["integer"] + counts["expression"]
    assert len({p.id for p in items}) == len(items)
    first = items[0]
    assert first.id == "champ/P_Combinatorics_1" and first.answer == "239"
    assert first.source == "champ" and first.prompt == first.question + " " + md.BOXED_INSTRUCTION
    with pytest.raises(ValueError, match="unknown CHAMP answer kinds"):
        champ.load_champ(kinds=("words",))


@needs_champ
def test_champ_expression_answers_parse_in_math_verify():
    pytest.importorskip("math_verify")
    from replication.tasks.math_reward import MathRewardConfig, MathVerifier

    items = champ.load_champ(kinds=("expression",))
    # braces around the gold defeat the exact-match shortcut: math-verify must parse both sides
    with MathVerifier(MathRewardConfig(time_limit_s=10, num_workers=2)) as v:
        ok = v.is_correct(["\\boxed{ {" + p.answer + "} }" for p in items], [p.answer for p in items])
    assert ok.all(), [p.answer for p, o in zip(items, ok) if not o]
