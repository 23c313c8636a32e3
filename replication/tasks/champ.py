"""CHAMP (PyPI ``champ-dataset``): 270 competition problems with answers, as an offline held-out
set of real math in the ``MathPrompt`` schema.

CHAMP (Mao et al., "CHAMP: A Competition-level Dataset for Fine-Grained Analyses of LLMs'
Mathematical Reasoning Capabilities", 2024) ships its data inside the wheel
(``champ_dataset/dataset_files/v0.json``: problems, concepts, hints). We read that JSON directly —
the package's own loader needs ``natsort`` and validates every annotated model conversation.

Answers are free-form text written in ASCII math ("2^(n-1)", "C(10, 5), or equivalently 252",
"0 is the only possible value", "No"). ``clean_answer`` reduces them to a checkable form and
``answer_kind`` sorts them:
- ``integer``: a plain integer (the safest for automatic checking);
- ``expression``: a formula, rewritten to LaTeX for math-verify (``2^{n-1}``, ``\\binom{10}{5}``);
- ``yes_no``: "Yes"/"No" (string match of the boxed answer);
- ``text``: anything else ("The limit does not exist") — not automatically checkable.
``load_champ`` keeps integer + expression answers by default.

    from replication.tasks.champ import load_champ
    held_out = load_champ(template="boxed")
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Sequence
from pathlib import Path

from replication.tasks.math_datasets import MathPrompt, get_template

ANSWER_KINDS = ("integer", "expression", "yes_no", "text")


def champ_json_path() -> Path:
    """The dataset file inside the installed wheel (found without importing the package)."""
    spec = importlib.util.find_spec("champ_dataset")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("CHAMP needs the PyPI package champ-dataset: "
                          "pip install champ-dataset==1.0.0")
    path = Path(list(spec.submodule_search_locations)[0]) / "dataset_files" / "v0.json"
    if not path.exists():
        raise FileNotFoundError(f"champ-dataset is installed but {path} is missing")
    return path


_PAREN_NOTE = re.compile(r"\s*\((?:i\.e\.|none|no such|no ).*\)\s*$", re.IGNORECASE)
_EQUIV = re.compile(r",?\s*or (?:equivalently|approximately)\s+", re.IGNORECASE)
_ONLY_VALUE = re.compile(r"^(?:(.+?) is the only possible value|The limit exists and is equal to "
                         r"(.+)|The only possible value for the limit is (.+))$", re.IGNORECASE)
_COUNT_NOUN = re.compile(r"^(-?\d+) (?:values|pairs|roots|inequalities|times)$", re.IGNORECASE)
_INTEGER = re.compile(r"^-?\d+$")
_MATHY = re.compile(r"^[0-9a-z+\-*/^()!.,=±√ \u2212]+$")
_WORD = re.compile(r"[a-z]{3,}")
_ALLOWED_WORDS = {"sqrt", "floor"}


def clean_answer(raw: str) -> str:
    """Drop CHAMP's explanatory tails: "(i.e., ...)", "X, or equivalently Y" -> Y,
    "X is the only possible value" -> X, "98 values" -> 98."""
    ans = raw.strip().rstrip(".")
    ans = _PAREN_NOTE.sub("", ans).strip()
    parts = [p.strip() for p in _EQUIV.split(ans)]
    if len(parts) > 1:
        # prefer the closed form: the last plain number, else the last formula, else the first
        numbers = [p for p in parts if _INTEGER.match(p)]
        formulas = [p for p in parts if answer_kind(p) == "expression"]
        ans = (numbers or formulas or parts)[-1 if (numbers or formulas) else 0]
    m = _ONLY_VALUE.match(ans) or _COUNT_NOUN.match(ans)
    if m:
        ans = next(g for g in m.groups() if g).strip()
    return ans


def answer_kind(answer: str) -> str:
    """One of ``ANSWER_KINDS`` for a cleaned answer."""
    if _INTEGER.match(answer):
        return "integer"
    if answer.lower() in ("yes", "no"):
        return "yes_no"
    low = answer.lower()
    words = set(_WORD.findall(low))
    flat = re.sub(r"c\([^()]*\)", "c", low)  # the comma inside C(n, k) is not a list
    # lists, equations, "..." and ± root lists stay text: no single value to compare against
    if (_MATHY.match(low) and words <= _ALLOWED_WORDS and "=" not in low and "," not in flat
            and ".." not in low and "±" not in low and " and " not in low):
        return "expression"
    return "text"


def _brace_groups(expr: str, head: str, open_: str, close: str) -> str:
    """Rewrite ``head(...)`` with balanced parentheses into ``open_ ... close``."""
    out, i = [], 0
    while True:
        j = expr.find(head + "(", i)
        if j < 0:
            out.append(expr[i:])
            return "".join(out)
        depth, k = 0, j + len(head)
        for k in range(j + len(head), len(expr)):
            depth += {"(": 1, ")": -1}.get(expr[k], 0)
            if depth == 0:
                break
        if depth != 0:  # unbalanced: leave the rest alone
            out.append(expr[i:])
            return "".join(out)
        out.append(expr[i:j] + open_ + expr[j + len(head) + 1:k] + close)
        i = k + 1


def ascii_to_latex(expr: str) -> str:
    """CHAMP's ASCII math to LaTeX that math-verify parses: x^(a+b) -> x^{a+b},
    sqrt(x) -> \\sqrt{x}, C(n, k) -> \\binom{n}{k}, floor(x) -> \\lfloor x \\rfloor."""
    s = expr.replace("\u2212", "-")
    s = _brace_groups(s, "^floor", "^{floor(", ")}")  # 2^floor(n/2) -> 2^{floor(n/2)}
    s = _brace_groups(s, "sqrt", "\\sqrt{", "}")
    s = _brace_groups(s, "floor", "\\lfloor ", " \\rfloor")
    s = re.sub(r"C\(([^,()]+),\s*([^()]+)\)", r"\\binom{\1}{\2}", s)
    s = _brace_groups(s, "^", "^{", "}")
    return s.replace("*", " \\cdot ")


def load_champ(template: str = "boxed", kinds: Sequence[str] = ("integer", "expression"),
               limit: int | None = None) -> list[MathPrompt]:
    """CHAMP problems whose cleaned answer is of one of ``kinds``, in the dataset's order.

    Ids are ``champ/<CHAMP identifier>`` (e.g. ``champ/P_Combinatorics_1``); answers are
    LaTeX for ``expression`` items and the cleaned text otherwise."""
    unknown = set(kinds) - set(ANSWER_KINDS)
    if unknown:
        raise ValueError(f"unknown CHAMP answer kinds {sorted(unknown)}; known: {ANSWER_KINDS}")
    tmpl = get_template(template)
    problems = json.loads(champ_json_path().read_text(encoding="utf-8"))["problems"]
    out: list[MathPrompt] = []
    for pid, prob in problems.items():
        answer = clean_answer(prob["_answer"])
        kind = answer_kind(answer)
        if kind not in kinds:
            continue
        if kind == "expression":
            answer = ascii_to_latex(answer)
        question = prob["_text"].strip()
        out.append(MathPrompt(f"champ/{pid}", tmpl.render(question), answer, "champ", question))
        if limit is not None and len(out) >= limit:
            break
    return out


def champ_kind_counts() -> dict[str, int]:
    """How many of the 270 problems fall in each answer kind."""
    problems = json.loads(champ_json_path().read_text(encoding="utf-8"))["problems"]
    counts = dict.fromkeys(ANSWER_KINDS, 0)
    for prob in problems.values():
        counts[answer_kind(clean_answer(prob["_answer"]))] += 1
    return counts
