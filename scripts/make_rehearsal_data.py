"""Write the rehearsal data: the problems of scripts/rehearsal_problems.py in each hub dataset's
own layout (file names, columns, nesting, types), as the rehearsal profiles read them
(replication/profiles/rehearsal-*.yaml, ``task.options.train_path`` / ``eval_paths``):

    data/rehearsal/dapo17k/data/dapo-math-17k.parquet       DAPO-Math-17k (VIP, DynaMO), each problem 3x
    data/rehearsal/dapo17k-processed/{en,cn}/train-00000-of-00001.parquet   DAPO-Math-17k-Processed (GDRO)
    data/rehearsal/<format>/aime_2024/data/train-00000-of-00001.parquet     HuggingFaceH4/aime_2024
    data/rehearsal/<format>/aime_2025/data/train-00000-of-00001.parquet     MathArena/aime_2025
    data/rehearsal/boxed/amc23/data/test-00000-of-00001.parquet             math-ai/amc23
    data/rehearsal/boxed/math500/test.jsonl                                 HuggingFaceH4/MATH-500
    data/rehearsal/boxed/minervamath/test.jsonl                             math-ai/minervamath
    data/rehearsal/boxed/olympiadbench/test.jsonl                           math-ai/olympiadbench
    data/rehearsal/gpqa/gpqa_diamond.csv                                    Idavidrein/gpqa (gpqa_diamond)

``<format>`` is ``answer_line`` (VIP evaluates AIME with its 4-shot prompt, read on the Answer line)
or ``boxed`` (DynaMO's and GDRO's evaluation prompts ask for \\boxed{}). Deterministic: the same
files every time (tests/rehearsal/test_rehearsal_data.py checks the committed ones load as written).

    python scripts/make_rehearsal_data.py [--out data/rehearsal]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rehearsal_problems import ANSWER_LINE_FORMS, BOXED_FORMS, GPQA, HARD, pool  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of "
    "the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'

TRAIN_NUMBERS = [3, 7, 4, 9, 5, 8, 6, 2]
"""The training pools' numbers (eval sets use others: EVAL_NUMBERS)."""
GDRO_EXTRA_NUMBERS = [25, 26, 27, 28, 29, 30, 31, 32]
"""More numbers for GDRO's pool, which fills two forms, not four (tens of problems, as the others)."""
EVAL_NUMBERS = {"aime24": [11, 13], "aime25": [14, 15], "amc23": [16, 17], "math500": [18, 19],
                "minerva": [21, 22], "olympiadbench": [23, 24]}


def dapo_row(question: str, answer: str, index: str) -> dict:
    """One row of BytedTsinghua-SIA/DAPO-Math-17k (verl layout, the prompt DAPO-wrapped)."""
    return {"data_source": "math_dapo",
            "prompt": [{"content": DAPO_PREFIX + question + DAPO_SUFFIX, "role": "user"}],
            "ability": "MATH",
            "reward_model": {"ground_truth": answer, "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": index}}


def processed_row(question: str, answer: str, index: str) -> dict:
    """One row of open-r1/DAPO-Math-17k-Processed: the wrapped prompt as a string, the answer as
    ``solution``, the original message list as ``source_prompt``."""
    r = dapo_row(question, answer, index)
    return {"prompt": r["prompt"][0]["content"], "solution": answer, "data_source": r["data_source"],
            "source_prompt": r["prompt"], "ability": r["ability"], "reward_model": r["reward_model"],
            "extra_info": r["extra_info"]}


def parquet(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)


def jsonl(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def eval_problems(name: str, forms: list[str]) -> list[tuple[str, str]]:
    return pool(forms, EVAL_NUMBERS[name], HARD[4:], every=1)  # hard ones of their own


def write_train(out: Path) -> None:
    answer_line = pool(ANSWER_LINE_FORMS, TRAIN_NUMBERS, HARD[:4])
    # the real file repeats every problem (1,791,700 rows of 17,398 problems); the loader dedupes
    parquet([dapo_row(q, a, f"rehearsal-{k:03d}-{rep}") for rep in range(3) for k, (q, a) in enumerate(answer_line)],
            out / "dapo17k" / "data" / "dapo-math-17k.parquet")
    # GDRO's pool: the two boxed forms solved most often, a hard problem after every four, so that
    # the 4-problem pool of rehearsal-gdro holds four SmolLM2 solves at 0.2-0.5. At GDRO's
    # temperature 0.6 the other two forms solved 0-2 in 16, and Rollout-GDRO, which sends the most
    # rollouts to the hardest bin, once gave 10 of its 16 to a never-solved problem and 2 to each
    # other: a step with no group holding a success.
    boxed = pool(BOXED_FORMS[:2], TRAIN_NUMBERS + GDRO_EXTRA_NUMBERS, HARD[:4], every=4)
    parquet([processed_row(q, a, f"rehearsal-{k:03d}") for k, (q, a) in enumerate(boxed)],
            out / "dapo17k-processed" / "en" / "train-00000-of-00001.parquet")
    parquet([processed_row("计算 $1+1$。", "2", "rehearsal-cn-0")],  # the config the loader must not pick
            out / "dapo17k-processed" / "cn" / "train-00000-of-00001.parquet")


def write_aime(out: Path, fmt: str, forms: list[str]) -> None:
    for offset, (name, folder) in enumerate((("aime24", "aime_2024"), ("aime25", "aime_2025"))):
        probs = eval_problems(name, forms)
        if name == "aime24":
            rows = [{"id": 60 + k, "problem": q, "solution": "...", "answer": a,
                     "url": f"https://artofproblemsolving.com/rehearsal/{k}", "year": "2024"}
                    for k, (q, a) in enumerate(probs)]
        else:
            rows = [{"problem_idx": k + 1, "problem": q, "answer": int(a)} for k, (q, a) in enumerate(probs)]
        parquet(rows, out / fmt / folder / "data" / "train-00000-of-00001.parquet")


def write_boxed_sets(out: Path) -> None:
    box = out / "boxed"
    parquet([{"id": k, "question": q, "answer": float(a), "url": f"rehearsal-{k}"}
             for k, (q, a) in enumerate(eval_problems("amc23", BOXED_FORMS))],
            box / "amc23" / "data" / "test-00000-of-00001.parquet")
    jsonl([{"problem": q, "solution": f"... $\\boxed{{{a}}}$", "answer": a, "subject": "Prealgebra",
            "level": 1, "unique_id": f"test/prealgebra/{k}.json"}
           for k, (q, a) in enumerate(eval_problems("math500", BOXED_FORMS))], box / "math500" / "test.jsonl")
    jsonl([{"question": q, "answer": a} for q, a in eval_problems("minerva", BOXED_FORMS)],
          box / "minervamath" / "test.jsonl")
    jsonl([{"id": 1600 + k, "question": q, "final_answer": [f"${a}$"], "solution": ["..."],
            "is_multiple_answer": False, "unit": None, "answer_type": "Numerical", "subfield": "Algebra",
            "language": "English", "modality": "Text-only", "difficulty": "Competition"}
           for k, (q, a) in enumerate(eval_problems("olympiadbench", BOXED_FORMS))],
          box / "olympiadbench" / "test.jsonl")


def write_gpqa(out: Path) -> None:
    cols = ["Pre-Revision Question", "Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
            "Incorrect Answer 3", "Explanation", "Record ID", "High-level domain", "Subdomain"]
    (out / "gpqa").mkdir(parents=True, exist_ok=True)
    with open(out / "gpqa" / "gpqa_diamond.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for k, (q, right, wrong) in enumerate(GPQA):
            w.writerow({"Pre-Revision Question": q, "Question": q, "Correct Answer": right,
                        "Incorrect Answer 1": wrong[0], "Incorrect Answer 2": wrong[1],
                        "Incorrect Answer 3": wrong[2], "Explanation": "...", "Record ID": f"recRehearsal{k}",
                        "High-level domain": "Physics", "Subdomain": "General"})


def write_all(out: Path) -> None:
    write_train(out)
    write_aime(out, "answer_line", ANSWER_LINE_FORMS)
    write_aime(out, "boxed", BOXED_FORMS)
    write_boxed_sets(out)
    write_gpqa(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "data" / "rehearsal")
    write_all(ap.parse_args().out)


if __name__ == "__main__":
    main()
