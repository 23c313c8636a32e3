"""Reading an answer out of a completion, and the cheap comparisons that need no math-verify:
pure functions, linear time, never raising on model output."""

from __future__ import annotations

import re

_BOX_TOKENS = re.compile(r"\\(?:boxed|fbox)\s*\{|[{}]")
_ANSWER_LINE = re.compile(r"(?im)^[ \t*#>_]*answer[ \t]*[*_]*[ \t]*[:：][ \t]*[*_]*[ \t]*(\S.*?)[ \t]*$")


def extract_last_boxed(text: str) -> str | None:
    """Content of the last balanced ``\\boxed{...}`` (or ``\\fbox{...}``); None if there is none
    or none is closed (an unclosed last box falls back to the previous closed one).

    One pass over the braces with a stack: linear even for 10^5 unclosed ``\\boxed{`` (a rescan
    from every opener would be quadratic and hang on exactly that input)."""
    if not isinstance(text, str):
        return None
    stack: list[int] = []  # content start of a box opener, or -1 for a plain "{"
    best: tuple[int, int] | None = None
    for m in _BOX_TOKENS.finditer(text):
        tok = m.group()
        if tok == "}":
            if stack:
                start = stack.pop()
                if start >= 0 and (best is None or start > best[0]):
                    best = (start, m.start())
        else:
            stack.append(m.end() if len(tok) > 1 else -1)
    return text[best[0]:best[1]].strip() if best else None


def extract_answer_line(text: str, tail_chars: int = 4000) -> str | None:
    """The last ``Answer: ...`` line (DAPO / VIP output format), with a trailing period and
    surrounding ``$`` removed."""
    if not isinstance(text, str):
        return None
    matches = _ANSWER_LINE.findall(text[-tail_chars:])
    if not matches:
        return None
    ans = matches[-1].strip().rstrip(".").strip()
    if len(ans) >= 2 and ans.startswith("$") and ans.endswith("$"):
        ans = ans.strip("$").strip()
    return ans or None


def extract_answer(text: str, mode: str = "auto", tail_chars: int = 4000) -> str | None:
    """Extracted answer string for the modes of ``MathRewardConfig.extraction`` (math_verify mode
    returns the tail itself: math-verify extracts in the worker)."""
    if mode == "boxed":
        return extract_last_boxed(text)
    if mode == "answer_line":
        return extract_answer_line(text, tail_chars)
    if mode == "auto":
        boxed = extract_last_boxed(text)
        return boxed if boxed is not None else extract_answer_line(text, tail_chars)
    if mode == "math_verify":
        return text[-tail_chars:] if isinstance(text, str) and text.strip() else None
    raise ValueError(f"unknown extraction mode {mode!r}")


_CHOICE = re.compile(r"^\(?([A-Ea-e])\)?$")
_GOLD_CHOICE = re.compile(r"^\(?([A-E])\)?$")  # upper case only: a gold "e" is Euler's number
_TEXT_WRAP = re.compile(r"^\\(?:text|textbf|mathrm|mathbf)\{(.*)\}$")


_WORD_ANSWERS = frozenset({"yes", "no", "true", "false"})  # compared as words, case-insensitive


def _normalise(s: str) -> str:
    s = s.strip().strip("$").strip()
    while True:
        m = _TEXT_WRAP.match(s)
        if not m:
            break
        s = m.group(1).strip()
    return re.sub(r"\s+", "", s).rstrip(".")


def choice_letter(s: str, gold: bool = False) -> str | None:
    """'C', '(C)', '\\text{(C)}' -> 'C'; anything else -> None. A gold answer counts as a choice
    only in upper case (A-E)."""
    m = (_GOLD_CHOICE if gold else _CHOICE).match(_normalise(s))
    return m.group(1).upper() if m else None
