"""What a math prompt is and how its text is made: the ``MathPrompt`` record and the prompt
templates of the papers (``TEMPLATES``).

Templates render the user message; the rollout engine applies the model's chat template on top
(verl does the same).
"""

from __future__ import annotations

import dataclasses

from replication.registry import Registry


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
    origin: str = dataclasses.field(default="", compare=False)
    """Where the row came from (``<file> row <n>``, or the hub dataset and row), for errors."""

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
