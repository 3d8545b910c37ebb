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


def messages(p: Problem) -> list[dict]:
    return [{"role": "user", "content": f"{p.text}\n{ANSWER_INSTRUCTION}"}]


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
    "addsub-20": Settings(("add", "sub"), 20, 1),
    "addsub-100": Settings(("add", "sub"), 100, 1),
    "mixed-12": Settings(("add", "sub", "mul", "div"), 12, 1),
    "addsub-20x2": Settings(("add", "sub"), 20, 2),
}
