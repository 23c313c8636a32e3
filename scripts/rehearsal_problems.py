"""The problems of the rehearsal data (scripts/make_rehearsal_data.py writes them into the real
datasets' layouts under data/rehearsal/).

A rehearsal trains SmolLM2-135M-Instruct for two steps with each paper's prompt template, answer
extraction and sampling temperature, and ~32 new tokens. Competition mathematics gives that model
a reward of −1 on every rollout: zero-variance groups, nothing for an allocator, an advantage
modulation or a GDRO adversary to act on. So most problems here are made easy for it on purpose,
in the answer format the paper's template asks for (an ``Answer:`` line for DAPO's and VIP's
templates, ``\\boxed{}`` for GDRO's and the default evaluation prompt), and some are hard ones it
never solves. How often it solves which is measured, not assumed: the rehearsal tests
(tests/rehearsal/) fail unless a run's rewards are mixed at every step (docs/rehearsal.md).

A form is a question with an ``{n}`` slot (filled by ``str.replace``: the braces of ``\\boxed{}``
stay literal) whose answer is ``n``. Training pools and every evaluation set fill the forms with
their own numbers, so no evaluation problem is also a training problem (the loader would drop it
from the pool).
"""

from __future__ import annotations

ANSWER_LINE_FORMS = [
    "Copy this line exactly:\nAnswer: {n}",
    'Write "Answer: {n}" and stop.',
    "Repeat after me: Answer: {n}",
    "Answer: {n}",
]
"""Easy forms for templates that ask for a last ``Answer: X`` line (DAPO's, VIP's 4-shot), most
often solved first: SmolLM2-135M-Instruct in its chat template around DAPO's prompt, temperature
1.0, 32 new tokens solved them 4, 3, 2 and 1 times in 16 (scripts/measure_rehearsal_data.py;
other forms tried solved 0 or 1 in 16)."""

BOXED_FORMS = [
    'Say "\\boxed{{n}}".',
    "Write \\boxed{{n}} and stop.",
    "What is ${n}+0$? (Hint: \\boxed{{n}})",
    "Copy this exactly: \\boxed{{n}}",
]
"""Easy forms for templates that ask for ``\\boxed{}`` (GDRO's, and the default evaluation prompt),
most often solved first: 4, 2, 2 and 1 in 16 under GDRO's template at temperature 0.6; measured
again at n = 3 and 7 (2026-12-06): 8 and 5, 3 and 4, 0, 2 in 16. GDRO's training pool uses the
first two only (scripts/make_rehearsal_data.py)."""

HARD = [
    ("Let $N$ be the number of ordered triples of positive integers $(a,b,c)$ with "
     "$a \\le b \\le c$ and $abc = 2^{6} 3^{5} 5^{4}$. Find the remainder when $N$ is divided by "
     "$1000$.", "616"),
    ("Find the largest prime factor of $3^{12} - 2^{12}$.", "97"),
    ("Compute $\\sum_{k=1}^{99} \\lfloor \\sqrt{k} \\rfloor$.", "615"),
    ("How many subsets of $\\{1, 2, \\ldots, 12\\}$ contain no two consecutive integers?", "377"),
    ("Find the number of positive divisors of $2^{10} \\cdot 3^{7} \\cdot 7^{3}$ that are perfect "
     "squares.", "96"),
    ("The polynomial $x^3 - 12x^2 + 44x - 48$ has roots $r, s, t$. Find $r^4 + s^4 + t^4$.", "1552"),
    ("Find the remainder when $7^{2024}$ is divided by $1000$.", "801"),
    ("How many lattice points lie strictly inside the triangle with vertices $(0,0)$, $(40,0)$ "
     "and $(0,30)$?", "571"),
]
"""Problems SmolLM2-135M never solves in 32 tokens (a reward of −1 on every rollout)."""


def fill(form: str, n: int) -> tuple[str, str]:
    """(question, answer) of a form at ``n``."""
    return form.replace("{n}", str(n)), str(n)


def pool(forms: list[str], numbers: list[int], hard: list[tuple[str, str]], every: int = 3) -> list[tuple[str, str]]:
    """Each form at each number (number-major), a hard problem after every ``every`` easy ones
    while hard ones last, then the rest of ``hard``: a pool cut to its first problems
    (``task.options.limit``) or an evaluation set cut to its first one or two
    (``eval.prompts_per_set``) keeps both kinds."""
    easy = [fill(f, n) for n in numbers for f in forms]
    out, hard = [], list(hard)
    for i, item in enumerate(easy):
        out.append(item)
        if (i + 1) % every == 0 and hard:
            out.append(hard.pop(0))
    return out + hard


GPQA = [
    ("Which of these is a colour?", "Blue", ("Seven", "Dog", "Run")),
    ("Which of these is a number?", "Three", ("Cat", "Green", "Walk")),
    ("Which particle carries a negative electric charge?", "Electron", ("Proton", "Neutron", "Photon")),
    ("Which quantity is conserved in every elastic collision of two bodies?", "Kinetic energy",
     ("Temperature", "Volume", "Colour")),
    ("What is the ground-state term symbol of atomic nitrogen?", "4S3/2", ("2P1/2", "2D5/2", "4P5/2")),
    ("Which reagent converts a primary alcohol to an aldehyde without over-oxidation?", "PCC",
     ("KMnO4", "H2CrO4", "HNO3")),
]
"""GPQA-diamond-like rows (question, correct option, three wrong ones): two that a boxed guess
answers a quarter of the time, then harder ones."""
