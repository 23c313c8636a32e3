"""Hub math datasets for the paper-scale profiles, in one schema: (id, prompt, answer, source).

Training pools: DAPO-Math-17k (VIP, DynaMO: the BytedTsinghua-SIA original, deduplicated by prompt
text as VIP did, 1,791,700 rows -> 17,398) and its open-r1 "en" processing (GDRO, ~14.1k).
Held-out sets: MATH-500, AIME 2024/2025, AMC23, Minerva, OlympiadBench, GPQA-diamond.

Every dataset loads either from a local file/folder (``path=``: .parquet, .jsonl, .json, .csv, a
``save_to_disk`` folder or a hub snapshot folder) or from the hub by id through ``datasets``.
Offline (``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` set, or the hub endpoint unreachable within a
few seconds) a hub load never waits on the network: it reads the local ``datasets`` cache only, and
failing that raises ``DatasetUnavailableError`` naming the dataset and the ``path=`` override.

    from replication.tasks.math_datasets import load_math_dataset
    pool = load_math_dataset("dapo17k", template="vip_4shot")          # VIP
    aime = load_math_dataset("aime24", template="boxed", path="data/aime_2024.parquet")

Prompt templates (``TEMPLATES``) render the user message; the rollout engine applies the model's
chat template on top (verl does the same). Hub ids and column names were checked against public
loaders of these datasets; see the per-dataset notes in ``DATASETS``.

This file holds the dataset registry and the loader; records and templates are in
``math_prompts.py``, the spec and load options in ``math_dataset_config.py``, row adapters in
``math_rows.py``, local files in ``math_files.py`` and hub access in ``math_hub.py`` (their
public names are importable from here too).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from typing import Any

from replication.registry import Registry
from replication.tasks.data_errors import DataError
from replication.tasks.math_dataset_config import MathDatasetConfig, MathDatasetSpec
from replication.tasks.math_files import _ORIGIN, _read_local
from replication.tasks.math_hub import (  # noqa: F401  (re-exported: the hub side of loading)
    DatasetUnavailableError,
    hub_offline_by_env,
    hub_reachable,
    _read_hub,
)
from replication.tasks.math_prompts import (  # noqa: F401  (re-exported: records and templates)
    BOXED_INSTRUCTION,
    DAPO_PREFIX,
    DAPO_SUFFIX,
    TEMPLATES,
    VIP_4SHOT,
    MathPrompt,
    PromptTemplate,
    get_template,
    register_template,
)
from replication.tasks.math_rows import (  # noqa: F401  (re-exported: row adapters)
    RowAdapter,
    answer_to_str,
    dapo_row,
    generic_row,
    gpqa_row,
    strip_dapo_wrapper,
)

# ---------------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------------


DATASETS: Registry[MathDatasetSpec] = Registry("dataset")


def register_dataset(spec: MathDatasetSpec) -> MathDatasetSpec:
    return DATASETS.register(spec.name, spec)


_flat = generic_row(("unique_id", "id", "ID", "problem_idx"),
                    ("problem", "question", "Problem", "Question"),
                    ("answer", "Answer", "final_answer"))

register_dataset(MathDatasetSpec(
    "dapo17k", "BytedTsinghua-SIA/DAPO-Math-17k", None, "train", dapo_row, dedupe=True,
    default_template="dapo",
    note="VIP/DynaMO training pool: data/dapo-math-17k.parquet, 1,791,700 rows of 17,398 problems "
         "(VIP dedupes by prompt text); columns data_source, prompt[{content, role}], ability, "
         "reward_model{ground_truth, style}, extra_info{index}."))
register_dataset(MathDatasetSpec(
    "dapo17k_en", "open-r1/DAPO-Math-17k-Processed", "en", "train", dapo_row, dedupe=True,
    default_template="boxed",
    note="GDRO training pool (paper App. A, ~14.1k English prompts): columns prompt, solution, "
         "data_source, source_prompt, ability, reward_model, extra_info."))
register_dataset(MathDatasetSpec(
    "math500", "HuggingFaceH4/MATH-500", None, "test", _flat,
    note="500 rows: problem, solution, answer, subject, level, unique_id."))
register_dataset(MathDatasetSpec(
    "aime24", "HuggingFaceH4/aime_2024", None, "train", _flat,
    note="30 rows: id, problem, solution, answer, url, year (GDRO's default id)."))
register_dataset(MathDatasetSpec(
    "aime24_dapo", "BytedTsinghua-SIA/AIME-2024", None, "train", dapo_row, dedupe=True,
    default_template="dapo",
    note="The copy VIP and DynaMO evaluate on: data/aime-2024.parquet, 30 problems x 32 repeats in "
         "the DAPO layout (deduplicated here)."))
register_dataset(MathDatasetSpec(
    "aime25", "MathArena/aime_2025", None, "train", _flat,
    note="30 rows: problem_idx, problem, answer (GDRO's default id; VIP used opencompass/AIME2025 "
         "configs AIME2025-I/II with question/answer columns — pass it with path=)."))
register_dataset(MathDatasetSpec(
    "amc23", "math-ai/amc23", None, "test", _flat,
    note="40 rows: id, question, answer (a float such as 27.0; written as '27')."))
register_dataset(MathDatasetSpec(
    "minerva", "math-ai/minervamath", None, "test", _flat,
    note="272 rows: question, answer."))
register_dataset(MathDatasetSpec(
    "olympiadbench", "math-ai/olympiadbench", None, "test", _flat,
    note="674 text-only English math rows: question, final_answer (a list, joined with ', ')."))
register_dataset(MathDatasetSpec(
    "gpqa_diamond", "Idavidrein/gpqa", "gpqa_diamond", "train", gpqa_row,
    default_template="gpqa_letter",
    note="198 rows (gated on the hub): Question, Correct Answer, Incorrect Answer 1-3, Record ID."))


def list_datasets() -> list[str]:
    return DATASETS.names()


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def load_math_dataset(name: str | MathDatasetConfig, **overrides: Any) -> list[MathPrompt]:
    """Load a registered dataset into ``MathPrompt`` records (see ``MathDatasetConfig``)."""
    cfg = name if isinstance(name, MathDatasetConfig) else MathDatasetConfig(name=name)
    if overrides:
        cfg = dataclasses.replace(cfg, **overrides)
    spec = DATASETS.get(cfg.name)
    template = get_template(cfg.template or spec.default_template)
    rows = _read_local(cfg.path, cfg.hub_config or spec.config, cfg.split or spec.split) \
        if cfg.path else _read_hub(spec, cfg)
    return rows_to_prompts(rows, spec, template, seed=cfg.seed, limit=cfg.limit)


def rows_to_prompts(rows: Sequence[Mapping[str, Any]], spec: MathDatasetSpec,
                    template: PromptTemplate, seed: int = 0,
                    limit: int | None = None) -> list[MathPrompt]:
    """Rows → prompts. A row without a question or answer (missing column, null or empty cell)
    is a ``DataError`` naming its file and row (rows read by ``_read_file`` carry their origin)."""
    out: list[MathPrompt] = []
    seen_questions: set[str] = set()
    first_at: dict[str, str] = {}  # prompt id -> where it was first read
    repeats: dict[str, list[str]] = {}  # prompt id -> every place it was read, when more than one
    if not rows:
        raise DataError(f"dataset {spec.name!r} has no rows")
    for index, row in enumerate(rows):
        origin = row.get(_ORIGIN) if isinstance(row, Mapping) else None
        if origin is not None:
            row = {k: v for k, v in row.items() if k != _ORIGIN}
        where = (f"{origin[0]} row {origin[1]}" if origin is not None
                 else f"dataset {spec.name!r} ({spec.hub_id}) row {index}")
        # one RNG per row, seeded by (seed, row index): a row's shuffle does not depend on others
        rng = random.Random(f"{seed}/{index}")
        adapted = spec.adapter(row, index, rng)
        if adapted is None:
            cols = sorted(map(str, row)) if isinstance(row, Mapping) else type(row).__name__
            raise DataError(f"{where}: no question or no answer for dataset {spec.name!r} "
                            f"(null cell or missing column; columns: {cols})")
        native, question, answer = adapted
        if not str(answer).strip() or not str(question).strip():
            what = "answer" if not str(answer).strip() else "question"
            raise DataError(f"{where}: empty or null {what}")
        if spec.dedupe:
            if question in seen_questions:
                continue
            seen_questions.add(question)
        pid = f"{spec.name}/{native}"
        if pid in first_at:  # allocators, the sampler and the logs key per-prompt state by id
            repeats.setdefault(pid, [first_at[pid]]).append(where)
            continue
        first_at[pid] = where
        out.append(MathPrompt(pid, template.render(question), answer, spec.name, question, where))
        if limit is not None and len(out) >= limit:
            break
    if repeats:
        pid, places = next(iter(repeats.items()))
        raise DataError(f"dataset {spec.name!r}: duplicate prompt ids {sorted(repeats)[:5]}"
                        f"{' ...' if len(repeats) > 5 else ''} ({len(repeats)} repeated); "
                        f"{pid!r} at {', '.join(places[:3])}{' ...' if len(places) > 3 else ''}")
    return out
