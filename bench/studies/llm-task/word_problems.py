"""Arithmetic word problems for the study: a port of libs/workflows/src/envs/word-problems.env.ts.

The study only needs the same templates, operand ranges and answer parser as the TypeScript task
(the seeded streams differ: Python's `random.Random`, not the TypeScript generator). The prompt
text is the same, so the base model's success measured here is the success of the product's task
at the same settings.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

NAMES = ["Sam", "Mia", "Leo", "Ava", "Tom", "Zoe", "Ben", "Lily", "Max", "Emma", "Noah", "Ella"]
ITEMS = ["apples", "books", "pencils", "stickers", "marbles", "cookies", "cards", "shells", "coins", "stamps"]

ANSWER_INSTRUCTION = "Solve the problem. End your reply with a line of the form 'Answer: <number>'."


@dataclass(frozen=True)
class Settings:
    ops: tuple[str, ...] = ("add", "sub")
    max_operand: int = 20
    steps: int = 1


@dataclass(frozen=True)
class Problem:
    text: str
    answer: int


# Each template: (statement, question). A chain of steps keeps the first statement and asks
# "How many ... now?" after its last step.
def _first(r: random.Random, ops, max_operand, chained):
    name = r.choice(NAMES)
    item = r.choice(ITEMS)
    op = r.choice(ops)
    # A chain continues with the named person, so it starts from their template (t = 0).
    t = 0 if chained else r.randrange(2)
    if op == "add":
        a, b = r.randint(2, max_operand), r.randint(1, max_operand)
        s = [
            (f"{name} has {a} {item}. {name} gets {b} more {item}.", f"How many {item} does {name} have now?"),
            (f"There are {a} {item} in a box. {name} puts in {b} more.", f"How many {item} are in the box now?"),
        ][t]
        return name, item, s, a + b
    if op == "sub":
        a = r.randint(2, max_operand)
        b = r.randint(1, a - 1)
        s = [
            (f"{name} has {a} {item}. {name} gives {b} {item} to a friend.", f"How many {item} does {name} have now?"),
            (f"There are {a} {item} in a box. {name} takes out {b}.", f"How many {item} are in the box now?"),
        ][t]
        return name, item, s, a - b
    if op == "mul":
        a, b = r.randint(2, min(max_operand, 12)), r.randint(2, min(max_operand, 12))
        s = [
            (f"{name} has {a} bags with {b} {item} in each bag.", f"How many {item} does {name} have in all?"),
            (f"There are {a} boxes. Each box holds {b} {item}.", f"How many {item} are there in all?"),
        ][t]
        return name, item, s, a * b
    if op == "div":
        q, b = r.randint(2, min(max_operand, 12)), r.randint(2, min(max_operand, 12))
        a = q * b
        s = [
            (f"{name} shares {a} {item} equally among {b} friends.", f"How many {item} does each friend get?"),
            (f"{name} puts {a} {item} into {b} equal piles.", f"How many {item} are in each pile?"),
        ][t]
        return name, item, s, q
    raise ValueError(op)


def generate(r: random.Random, s: Settings) -> Problem:
    name, item, (text, question), value = _first(r, s.ops, s.max_operand, s.steps > 1)
    for _ in range(s.steps - 1):
        if value > 1 and r.random() < 0.5:
            b = r.randint(1, min(value - 1, s.max_operand))
            text += f" Then {name} loses {b} {item}."
            value -= b
        else:
            b = r.randint(1, s.max_operand)
            text += f" Then {name} finds {b} more {item}."
            value += b
        question = f"How many {item} does {name} have now?"
    return Problem(f"{text} {question}", value)


# Worked examples shown before the problem in the "shots" style: a short computation, then the
# tagged answer. Their names and items are outside the generator's lists, so no problem equals one.
SHOTS = [
    ("Ann has 7 pens. Ann gets 5 more pens. How many pens does Ann have now?", "7 + 5 = 12\nAnswer: 12"),
    ("There are 9 cups in a box. Jo takes out 4. How many cups are in the box now?", "9 - 4 = 5\nAnswer: 5"),
]


SYSTEM = "Solve each problem. End with 'Answer: <number>'."


def messages(p: Problem, style: str = "shots") -> list[dict]:
    """tagged: the problem and the answer format (77 prompt tokens with the template's default system
    prompt); shots: the format as the system prompt, two worked examples, then the problem (146);
    shots-long: the tagged question after the two examples, each with the instruction (214)."""
    if style == "tagged":
        return [{"role": "user", "content": f"{p.text}\n{ANSWER_INSTRUCTION}"}]
    if style == "shots":
        m = [{"role": "system", "content": SYSTEM}]
        for q, a in SHOTS:
            m += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        return m + [{"role": "user", "content": p.text}]
    if style == "shots-long":
        m = []
        for q, a in SHOTS:
            m += [{"role": "user", "content": f"{q}\n{ANSWER_INSTRUCTION}"}, {"role": "assistant", "content": a}]
        return m + [{"role": "user", "content": f"{p.text}\n{ANSWER_INSTRUCTION}"}]
    raise ValueError(style)


VERIFIER_SYSTEM = "Check the proposed answer to each problem. End with 'Verdict: correct' or 'Verdict: incorrect'."
VERIFIER_SHOTS = [
    ("Ann has 7 pens. Ann gets 5 more pens. How many pens does Ann have now?", 12, "7 + 5 = 12, and 12 is proposed.\nVerdict: correct"),
    ("There are 9 cups in a box. Jo takes out 4. How many cups are in the box now?", 6, "9 - 4 = 5, but 6 is proposed.\nVerdict: incorrect"),
]


def verifier_messages(p: Problem, proposed) -> list[dict]:
    shown = "(no number given)" if proposed is None else str(proposed)
    m = [{"role": "system", "content": VERIFIER_SYSTEM}]
    for q, a, reply in VERIFIER_SHOTS:
        m += [{"role": "user", "content": f"Problem: {q}\nProposed answer: {a}"}, {"role": "assistant", "content": reply}]
    return m + [{"role": "user", "content": f"Problem: {p.text}\nProposed answer: {shown}"}]


_VERDICT_TAG = re.compile(r"verdict\s*[:=]?\s*\**\s*(incorrect|correct|wrong|right)\b", re.IGNORECASE)
_VERDICT_WORD = re.compile(r"\b(incorrect|not correct|correct|wrong|right|yes|no)\b", re.IGNORECASE)


def parse_verdict(text: str):
    tags = _VERDICT_TAG.findall(text)
    if tags:
        w = tags[-1]
    else:
        m = _VERDICT_WORD.search(text)
        if not m:
            return None
        w = m.group(1)
    return w.lower() in ("correct", "right", "yes")


_ANSWER = re.compile(r"answer\s*(?:is)?\s*[:=]?\s*\**\s*(-?\d[\d,]*(?:\.\d+)?)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _to_int(s: str):
    s = s.replace(",", "")
    try:
        v = float(s)
    except ValueError:
        return None
    return int(v) if v == int(v) else None


def parse_answer(text: str):
    """The last 'Answer: N' if any, else the last number in the text; None if there is none."""
    m = _ANSWER.findall(text)
    if m:
        return _to_int(m[-1])
    n = _NUMBER.findall(text)
    return _to_int(n[-1]) if n else None


VARIANTS = {
    "add-10": Settings(("add",), 10, 1),
    "addsub-10": Settings(("add", "sub"), 10, 1),
    "addsub-20": Settings(("add", "sub"), 20, 1),
    "addsub-100": Settings(("add", "sub"), 100, 1),
    "mixed-12": Settings(("add", "sub", "mul", "div"), 12, 1),
    "addsub-20x2": Settings(("add", "sub"), 20, 2),
}
