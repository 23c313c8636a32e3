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
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import math
import os
import random
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from replication.registry import Registry
from replication.tasks.data_errors import DataError, DataNotFoundError

# ---------------------------------------------------------------------------------------------
# Records and templates
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MathPrompt:
    """One problem with a verifiable answer, ready for the rollout engine."""

    id: str
    """Stable id ``<dataset>/<native id or row index>`` (allocators key their state by it)."""
    prompt: str
    """User-message text: the problem rendered with a prompt template."""
    answer: str
    """Reference answer as a string (math-verify gold; a letter A-D for GPQA)."""
    source: str
    """Registry name of the dataset (``aime24``, ``dapo17k`` ...)."""
    question: str = ""
    """The bare problem before templating (what VIP's GP embeds)."""

    @property
    def text(self) -> str:
        """Alias of ``prompt`` (the procedural-task ``Prompt`` record calls it ``text``)."""
        return self.prompt


@dataclasses.dataclass(frozen=True)
class PromptTemplate:
    """How a paper turned a bare problem into the user message."""

    name: str
    """Registry key."""
    text: str
    """Template with one ``{question}`` slot (rendered with str.replace, so braces are literal)."""
    answer_format: str
    """Where the model is told to put its answer: ``boxed`` (last \\boxed{}) or ``answer_line``
    (last ``Answer: ...`` line) — pick the reward's extraction mode to match."""
    note: str = ""
    """Where the text comes from."""

    def render(self, question: str) -> str:
        return self.text.replace("{question}", question)


# DAPO-Math-17k ships every problem wrapped in this instruction (the verl DAPO recipe trains on it
# unchanged; its verifier reads the last "Answer:" line).
DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of "
    "the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'

# verl's math preprocessing instruction; GDRO (App. A and its build_math_benchmarks.py) appends it
# to every question after one space.
BOXED_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."

# VIP's 4-shot format prompt (official repo, notebook/convert_data_format.ipynb -> the parquet files
# its scripts download). Their Python string was not raw, so "\boxed" reached the model as a
# backspace + "oxed{}"; we keep the intended "\boxed{}" text.
VIP_4SHOT = (
    "Solve the following math problem step by step. \n"
    "The last line of your response must be exactly of the form:\n"
    "Answer: X\n"
    "(where X is the final answer, without quotes or \\boxed{}). \n"
    "Do not write anything after the answer line.\n\n"
    "Below are four examples for format reference.\n\n"
    "Example question 1: There are 15 trees in the grove. Grove workers will plant trees in the "
    "grove today. After they are done, there will be 21 trees. How many trees did the grove workers "
    "plant today?\n\n"
    "Response:\n"
    "There are 15 trees originally. Then there were 21 trees after some more were planted. \n"
    "So there must have been 21 - 15 = 6.\n"
    "Answer: 6\n\n"
    "Example question 2: If there are 3 cars in the parking lot and 2 more cars arrive, how many "
    "cars are in the parking lot?\n\n"
    "Response:\n"
    "There are originally 3 cars. 2 more cars arrive. \n"
    "3 + 2 = 5.\n"
    "Answer: 5\n\n"
    "Example question 3: Leah had 32 chocolates and her sister had 42. If they ate 35, how many "
    "pieces do they have left in total?\n\n"
    "Response:\n"
    "Originally, Leah had 32 chocolates. Her sister had 42. \n"
    "So in total they had 32 + 42 = 74. \n"
    "After eating 35, they had 74 - 35 = 39.\n"
    "Answer: 39\n\n"
    "Example question 4: Jason had 20 lollipops. He gave Denny some lollipops. Now Jason has 12 "
    "lollipops. How many lollipops did Jason give to Denny?\n\n"
    "Response:\n"
    "Jason started with 20 lollipops. Then he had 12 after giving some to Denny. \n"
    "So he gave Denny 20 - 12 = 8.\n"
    "Answer: 8\n\n"
    'Solve the current question. Remember to put your final answer on its own line after "Answer:".\n'
    "Current question: {question}\n\n"
    "Response:\n"
)

TEMPLATES: Registry[PromptTemplate] = Registry("prompt template")


def register_template(template: PromptTemplate) -> PromptTemplate:
    return TEMPLATES.register(template.name, template)


register_template(PromptTemplate("raw", "{question}", "boxed", "the bare problem"))
register_template(PromptTemplate(
    "boxed", "{question} " + BOXED_INSTRUCTION, "boxed",
    "GDRO (paper App. A; verl-gdro examples/data_preprocess/*.py) = verl's default math prompt. "
    "GDRO's builder appended it to open-r1's `prompt` column, which open-r1's create_dataset.py "
    "copies from the DAPO-wrapped message (two answer-format instructions); we follow the paper "
    "text and append it to the bare question"))
register_template(PromptTemplate(
    "dapo", DAPO_PREFIX + "{question}" + DAPO_SUFFIX, "answer_line",
    "DAPO-Math-17k's own wrapper; DynaMO's script trains on the parquet prompt as is"))
register_template(PromptTemplate(
    "vip_4shot", VIP_4SHOT, "answer_line",
    "VIP official data prep (JunHill/Dedup-4shot-DAPO-Math-17k and 4shot-aime24/25/amc)"))
register_template(PromptTemplate(
    "qwen_boxed", "{question}\nPlease reason step by step, and put your final answer within \\boxed{}.",
    "boxed", "Qwen2.5-Math evaluation prompt (common for AIME/AMC/MATH-500 evaluation)"))
register_template(PromptTemplate(
    "gpqa_letter",
    "{question}\n\nPlease reason step by step, and put your final answer within \\boxed{}.\n"
    "Please only provide the letter of the answer in the box.",
    "boxed", "GDRO's GPQA-diamond prompt (verl-gdro build_math_benchmarks.py)"))


def get_template(name: str) -> PromptTemplate:
    return TEMPLATES.get(name)


# ---------------------------------------------------------------------------------------------
# Row adapters: raw hub row -> (native id, question, answer); None drops the row
# ---------------------------------------------------------------------------------------------

RowAdapter = Callable[[Mapping[str, Any], int, random.Random], "tuple[str, str, str] | None"]


def answer_to_str(value: Any) -> str:
    """Hub answers come as str, int, float (AMC23: 27.0) or lists (OlympiadBench): one string."""
    if value is None:
        return ""
    if isinstance(value, float) and math.isnan(value):  # a null cell read by pandas
        return ""
    if hasattr(value, "tolist"):  # numpy arrays / scalars from parquet
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return ", ".join(answer_to_str(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def strip_dapo_wrapper(content: str) -> str:
    """The bare problem inside DAPO's instruction wrapper (unchanged if not wrapped)."""
    text = content.strip()
    if text.startswith(DAPO_PREFIX.strip()) and text.endswith(DAPO_SUFFIX.strip()):
        text = text[len(DAPO_PREFIX.strip()):len(text) - len(DAPO_SUFFIX.strip())]
    return text.strip()


def _first_message_content(prompt: Any) -> str:
    """verl parquet ``prompt`` column: a list of {role, content} (a numpy array via pandas)."""
    if isinstance(prompt, str):
        return prompt
    if hasattr(prompt, "tolist"):
        prompt = prompt.tolist()
    if isinstance(prompt, Sequence) and prompt and isinstance(prompt[0], Mapping):
        return str(prompt[0].get("content", ""))
    return str(prompt)


def _first(row: Mapping[str, Any], keys: Sequence[str]) -> Any:
    for k in keys:
        if k in row and row[k] is not None:
            return row[k]
    return None


def _nested(row: Mapping[str, Any], key: str, sub: str) -> Any:
    value = row.get(key)
    return value.get(sub) if isinstance(value, Mapping) else None


def generic_row(id_keys: Sequence[str], question_keys: Sequence[str],
                answer_keys: Sequence[str]) -> RowAdapter:
    """Adapter for flat datasets; a verl-style row (prompt list + reward_model) also works."""

    def adapt(row: Mapping[str, Any], index: int, rng: random.Random) -> tuple[str, str, str] | None:
        question = _first(row, question_keys)
        answer = _first(row, answer_keys)
        if question is None and "prompt" in row:  # verl/DAPO layout
            question = strip_dapo_wrapper(_first_message_content(row["prompt"]))
        if answer is None:
            answer = _nested(row, "reward_model", "ground_truth")
        if question is None or answer is None:
            return None
        native = _first(row, id_keys)
        if native is None:
            native = _nested(row, "extra_info", "index")
        return (str(index) if native is None else str(native), str(question).strip(),
                answer_to_str(answer))

    return adapt


def dapo_row(row: Mapping[str, Any], index: int, rng: random.Random) -> tuple[str, str, str] | None:
    """BytedTsinghua-SIA/DAPO-Math-17k (and open-r1's copy, whose ``prompt`` is a string and whose
    ``solution`` holds the ground truth)."""
    question = strip_dapo_wrapper(_first_message_content(row.get("prompt", "")))
    answer = _nested(row, "reward_model", "ground_truth")
    if answer is None:
        answer = row.get("solution")
    if not question or answer is None:
        return None
    native = _nested(row, "extra_info", "index")
    return (str(index) if native is None else str(native), question, answer_to_str(answer))


def gpqa_row(row: Mapping[str, Any], index: int, rng: random.Random) -> tuple[str, str, str] | None:
    """Idavidrein/gpqa (gpqa_diamond): four options shuffled with a seeded RNG (GDRO's builder
    shuffled unseeded); the answer is the letter of the correct option."""
    correct = row.get("Correct Answer")
    wrong = [row.get(f"Incorrect Answer {i}") for i in (1, 2, 3)]
    if row.get("Question") is None or correct is None or any(w is None for w in wrong):
        return None
    options = [str(w).strip() for w in wrong]
    rng.shuffle(options)
    gold = rng.randrange(4)
    options.insert(gold, str(correct).strip())
    body = "\n".join(f"{'ABCD'[i]}: {opt}" for i, opt in enumerate(options))
    native = row.get("Record ID") or index
    return str(native), f"{str(row['Question']).strip()}\n\n{body}", "ABCD"[gold]


# ---------------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MathDatasetSpec:
    """Where a dataset lives on the hub and how its rows map to the schema."""

    name: str
    hub_id: str
    config: str | None
    split: str
    adapter: RowAdapter
    dedupe: bool = False
    """Keep the first row of each distinct question (VIP deduplicated DAPO-Math-17k this way)."""
    default_template: str = "boxed"
    note: str = ""


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


class DatasetUnavailableError(RuntimeError):
    """A dataset could not be loaded without the network (or at all); the message says how."""


@dataclasses.dataclass(frozen=True)
class MathDatasetConfig:
    """Which dataset, which prompt template, and where to read it from."""

    name: str
    """Registry name: dapo17k, dapo17k_en, math500, aime24, aime24_dapo, aime25, amc23, minerva,
    olympiadbench, gpqa_diamond."""
    template: str | None = None
    """Prompt template (``TEMPLATES``); None = the dataset's default (VIP: vip_4shot; GDRO: boxed;
    DynaMO: dapo for training)."""
    path: str | None = None
    """Local file or folder that replaces the hub download (the offline override)."""
    hub_id: str | None = None
    """Another hub id with the same columns (e.g. a mirror)."""
    hub_config: str | None = None
    """Hub config name override (DAPO-Math-17k-Processed: en / cn / all)."""
    split: str | None = None
    """Split override (default: the spec's split)."""
    revision: str | None = None
    """Hub revision (commit sha) to pin."""
    limit: int | None = None
    """Keep only the first ``limit`` problems (after dedupe)."""
    seed: int = 0
    """Seed of the GPQA option shuffle."""
    probe_timeout_s: float = 3.0
    """Seconds to wait for the hub endpoint before declaring the machine offline."""


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
    seen_ids: set[str] = set()
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
        if pid in seen_ids:  # duplicate native ids would break per-prompt bookkeeping
            pid = f"{spec.name}/{native}#{hashlib.sha1(question.encode()).hexdigest()[:8]}"
        seen_ids.add(pid)
        out.append(MathPrompt(pid, template.render(question), answer, spec.name, question))
        if limit is not None and len(out) >= limit:
            break
    return out


_DATA_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv", ".arrow")


def _read_local(path: str, config: str | None, split: str) -> list[dict[str, Any]]:
    p = Path(path).expanduser()
    if not p.exists():
        raise DataNotFoundError(f"local dataset path {p} does not exist")
    if p.is_file():
        return _read_file(p)
    if (p / "dataset_info.json").exists() or (p / "dataset_dict.json").exists():
        datasets = _require_datasets(str(p))
        ds = datasets.load_from_disk(str(p))
        if hasattr(ds, "keys"):  # DatasetDict
            ds = ds[split] if split in ds else ds[next(iter(ds.keys()))]
        return [dict(r) for r in ds]
    root = p / config if config and (p / config).is_dir() else p
    files = sorted(f for f in glob.glob(str(root / "**" / "*"), recursive=True)
                   if f.endswith(_DATA_SUFFIXES) and not Path(f).name.startswith("."))
    if not files:
        raise DataNotFoundError(f"no data files ({', '.join(_DATA_SUFFIXES)}) under {root}")
    if config and root == p:  # configs as file names (Idavidrein/gpqa: gpqa_diamond.csv, ...)
        named = [f for f in files if config in Path(f).name]
        files = named or files
    # hub snapshots name files after the split (data/test-00000-of-00001.parquet, test.jsonl)
    for_split = [f for f in files if Path(f).name.startswith(split)]
    rows: list[dict[str, Any]] = []
    for f in for_split or files:
        rows.extend(_read_file(Path(f)))
    return rows


_ORIGIN = "__origin__"
"""Row key set by ``_read_file``: (file, row number), for error messages; removed before use."""


def _read_file(p: Path) -> list[dict[str, Any]]:
    """Rows of one data file, each tagged with its origin; a malformed or empty file is a
    ``DataError`` naming it."""
    import pandas as pd

    suffix = p.suffix.lower()
    if suffix not in (".parquet", ".jsonl", ".json", ".csv", ".arrow"):
        raise DataError(f"{p}: unsupported dataset file type {p.suffix!r}")
    if p.stat().st_size == 0:
        raise DataError(f"{p}: empty file")
    try:
        if suffix == ".parquet":
            df = pd.read_parquet(p)
        elif suffix == ".jsonl":
            df = pd.read_json(p, lines=True, dtype=False)
        elif suffix == ".json":
            df = pd.read_json(p, dtype=False)
        elif suffix == ".csv":
            df = pd.read_csv(p, dtype=str, keep_default_na=False)
        else:
            datasets = _require_datasets(str(p))
            records = [dict(r) for r in datasets.Dataset.from_file(str(p))]
            df = None
    except ImportError:
        raise
    except Exception as e:  # noqa: BLE001 - every reader's parse error, one line naming the file
        msg = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise DataError(f"{p}: malformed {suffix[1:]} file ({msg[:200]})") from None
    if df is not None:
        records = df.to_dict("records")
    if not records:
        raise DataError(f"{p}: no rows")
    return [{**r, _ORIGIN: (str(p), i)} for i, r in enumerate(records)]


def _require_datasets(what: str) -> Any:
    try:
        import datasets
    except ImportError as err:
        raise ImportError(
            f"loading {what} needs the `datasets` package: pip install -e '.[math]' "
            "(or datasets>=3.0); local .parquet/.jsonl/.json/.csv files load without it"
        ) from err
    return datasets


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def hub_offline_by_env() -> bool:
    return _env_true("HF_HUB_OFFLINE") or _env_true("HF_DATASETS_OFFLINE")


def hub_reachable(timeout_s: float) -> bool:
    """One TCP connect to the hub endpoint (HF_ENDPOINT or huggingface.co:443), bounded in time."""
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _unavailable(spec: MathDatasetSpec, cfg: MathDatasetConfig, why: str) -> DatasetUnavailableError:
    hub_id = cfg.hub_id or spec.hub_id
    return DatasetUnavailableError(
        f"dataset {spec.name!r} ({hub_id}) is not available: {why}. Download it on a connected "
        f"machine (e.g. `huggingface-cli download --repo-type dataset {hub_id} --local-dir DIR`) "
        f"and pass path=DIR (MathDatasetConfig.path / the profile's dataset path override), or "
        "point it at a .parquet/.jsonl file with the same columns."
    )


def _read_hub(spec: MathDatasetSpec, cfg: MathDatasetConfig) -> list[dict[str, Any]]:
    offline = hub_offline_by_env()
    if not offline and not hub_reachable(cfg.probe_timeout_s):
        raise _unavailable(spec, cfg, f"the hub is unreachable (no answer within "
                                      f"{cfg.probe_timeout_s:.0f} s) and no local path was given")
    datasets = _require_datasets(f"{spec.name} from the hub")
    kwargs: dict[str, Any] = {"split": cfg.split or spec.split}
    if cfg.revision:
        kwargs["revision"] = cfg.revision
    args = [cfg.hub_id or spec.hub_id]
    if cfg.hub_config or spec.config:
        args.append(cfg.hub_config or spec.config)
    try:
        if offline:
            with _forced_offline():
                ds = datasets.load_dataset(*args, **kwargs)
        else:
            ds = datasets.load_dataset(*args, **kwargs)
    except Exception as err:  # noqa: BLE001 - every failure gets the same actionable message
        why = "offline mode is set and it is not in the local datasets cache" if offline \
            else f"{type(err).__name__}: {err}"
        raise _unavailable(spec, cfg, why) from err
    return [dict(r) for r in ds]


class _forced_offline:
    """Make ``datasets``/``huggingface_hub`` treat this call as offline even when the env var was
    set after they were imported (both read it into module constants at import time)."""

    def __init__(self) -> None:
        self._targets: list[tuple[Any, str]] = []
        for mod_name, attr in (("datasets.config", "HF_HUB_OFFLINE"),
                               ("datasets.config", "HF_DATASETS_OFFLINE"),
                               ("huggingface_hub.constants", "HF_HUB_OFFLINE")):
            mod = _import_optional(mod_name)
            if mod is not None and hasattr(mod, attr):
                self._targets.append((mod, attr))
        self._saved: list[Any] = []

    def __enter__(self) -> None:
        self._saved = [getattr(m, a) for m, a in self._targets]
        for m, a in self._targets:
            setattr(m, a, True)

    def __exit__(self, *exc: Any) -> None:
        for (m, a), v in zip(self._targets, self._saved):
            setattr(m, a, v)


def _import_optional(name: str) -> Any:
    try:
        import importlib

        return importlib.import_module(name)
    except ImportError:
        return None
