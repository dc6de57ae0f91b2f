#!/usr/bin/env python3
"""Writes tasks.jsonl and plans.jsonl: 45 small questions with gold answers and a recorded plan each
(1-7 steps: single steps, chains, fan-outs, diamonds, two-root and mixed DAGs), made for icmlkit's
HybridFlow tests and repro.  Not the paper's data: the reference ships no plans.  Deterministic:
    python3 data/hybridflow/make_fixture.py data/hybridflow
"""
import json
import random
import sys

EXPLAIN = ("To assist the following agents, what is your understanding of the question after reviewing it, "
           "focusing only on essential information and filtering out all irrelevant details?")
FINAL = "After reviewing the original question and the thoughts of previous agents, what is the final answer to the question?"


def plan_xml(steps):
    lines = ["<Plan>"]
    for i, (task, diff, tok, rely) in enumerate(steps, 1):
        lines.append(f'<Step ID="{i}" Task="{task}" Difficulty="{diff}" Token="{tok}" Rely="{",".join(map(str, rely))}"/>')
    lines.append("</Plan>")
    return "\n".join(lines)


def shopping(r):
    a, b, x, y = r.randint(2, 9), r.randint(3, 12), r.randint(2, 6), r.randint(1, 5)
    q = f"Pens cost {a} dollars each and notebooks cost {b} dollars each. Ana buys {x} pens and {y} notebooks. How many dollars does she spend?"
    steps = [(EXPLAIN, 2, 40, []), (f"What do {x} pens at {a} dollars each cost?", 1, 15, [1]),
             (f"What do {y} notebooks at {b} dollars each cost?", 1, 15, [1]), (FINAL, 2, 15, [2, 3])]
    return q, str(a * x + b * y), "integer", steps, "diamond"


def ages(r):
    m, a = r.randint(3, 12), r.randint(2, 9)
    q = f"Max is {m} years old. Sue is twice as old as Max. Tom is {a} years older than Sue. How old is Tom?"
    steps = [(EXPLAIN, 3, 40, []), ("How old is Sue, who is twice as old as Max?", 2, 15, [1]),
             (f"Given Sue's age, how old is Tom, who is {a} years older?", 2, 15, [2]), (FINAL, 3, 15, [3])]
    return q, str(2 * m + a), "integer", steps, "chain"


def is_prime(n):
    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))


def prime_choice(r):
    primes = [p for p in range(20, 200) if is_prime(p)]
    composites = [c for c in range(20, 200) if not is_prime(c) and c % 2 == 1]
    opts = r.sample(composites, 3) + [r.choice(primes)]
    r.shuffle(opts)
    letter = "ABCD"[next(i for i, o in enumerate(opts) if is_prime(o))]
    q = "Which of these numbers is prime? " + " ".join(f"{l}. {o}" for l, o in zip("ABCD", opts))
    steps = [(EXPLAIN, 3, 40, [])] + [(f"Is {o} a prime number? Check its divisors.", r.choice([3, 4, 5, 6]), 40, [1]) for o in opts] + [
        (FINAL, 4, 15, [2, 3, 4, 5])]
    return q, letter, "letter", steps, "fan-out"


def rectangle(r):
    w, h = r.randint(2, 15), r.randint(2, 15)
    q = f"A rectangle is {w} m wide and {h} m long. What is its perimeter in metres plus its area in square metres?"
    steps = [(EXPLAIN, 2, 40, []), ("What is the rectangle's perimeter?", 2, 20, [1]), ("What is the rectangle's area?", 1, 20, [1]),
             ("What is the perimeter plus the area?", 1, 10, [2, 3]), (FINAL, 2, 10, [4])]
    return q, str(2 * (w + h) + w * h), "integer", steps, "diamond+chain"


def mean(r):
    xs = [r.randint(50, 100) for _ in range(4)]
    s = sum(xs)
    xs[-1] += (4 - s % 4) % 4
    q = "Four test scores are " + ", ".join(map(str, xs)) + ". What is their mean?"
    steps = [("What is the sum of the four scores?", 2, 20, []), ("What is that sum divided by four?", 2, 15, [1]), (FINAL, 3, 10, [2])]
    return q, str(sum(xs) // 4), "integer", steps, "chain"


def minutes(r):
    d, h = r.randint(1, 6), r.randint(1, 23)
    q = f"How many minutes are there in {d} days and {h} hours?"
    steps = [(f"How many minutes are there in {d} days?", 2, 20, []), (f"How many minutes are there in {h} hours?", 1, 20, []),
             ("What is the sum of the two numbers of minutes?", 1, 10, [1, 2])]
    return q, str(d * 1440 + h * 60), "integer", steps, "two-root"


def product(r):
    a, b = r.randint(11, 99), r.randint(11, 99)
    q = f"What is {a} times {b}?"
    return q, str(a * b), "integer", [(f"What is {a} multiplied by {b}?", r.choice([2, 3, 5, 6]), 20, [])], "single"


def order(r):
    xs = r.sample(range(1, 100), 4)
    q = "Order the numbers " + ", ".join(map(str, xs)) + " from smallest to largest. Answer as <solution>a, b, c, d</solution>."
    steps = [(EXPLAIN, 2, 40, []), ("Which of the numbers is the smallest and which is the largest?", 3, 20, [1]),
             ("How do the two middle numbers compare?", 2, 20, [1]), ("Write the four numbers from smallest to largest as a list.", 4, 20, [2, 3]),
             (FINAL, 5, 20, [4])]
    return q, "<solution>" + ", ".join(map(str, sorted(xs))) + "</solution>", "solution", steps, "diamond+chain"


def farm(r):
    c, h, k, e = r.randint(3, 20), r.randint(5, 40), r.randint(2, 9), r.randint(1, 3)
    q = (f"A farm has {c} cows and {h} hens. A cow has 4 legs and eats {k} kg of feed a day; a hen has 2 legs and eats 0 kg of "
         f"cow feed. The farmer buys {e} extra cows. How many legs are on the farm, plus the kilograms of feed the cows eat in a day?")
    steps = [(EXPLAIN, 4, 60, []), ("How many cows are there after the purchase?", 2, 15, [1]), ("How many hen legs are there?", 1, 15, [1]),
             ("How many kilograms of feed does one cow eat a day?", 1, 15, [1]), ("How many legs do the cows have in all?", 2, 15, [2]),
             ("How much feed do all the cows eat in a day?", 3, 20, [2, 4]), (FINAL, 6, 20, [3, 5, 6])]
    cows = c + e
    return q, str(cows * 4 + 2 * h + cows * k), "integer", steps, "mixed"


FAMILIES = [shopping, ages, prime_choice, rectangle, mean, minutes, product, order, farm]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    r = random.Random(20261205)
    with open(f"{out}/tasks.jsonl", "w") as ft, open(f"{out}/plans.jsonl", "w") as fp:
        n = 0
        for rep in range(5):
            for fam in FAMILIES:
                n += 1
                q, ans, kind, steps, shape = fam(r)
                # jitter the planner's estimates as a planner would
                steps = [(t, max(1, min(9, d + r.choice([-1, 0, 0, 1]))), tok, rely) for t, d, tok, rely in steps]
                tid = f"hf{n:02d}"
                ft.write(json.dumps({"id": tid, "problem": q, "answer": ans, "kind": kind, "family": fam.__name__}) + "\n")
                fp.write(json.dumps({"id": tid, "shape": shape, "plan": plan_xml(steps)}) + "\n")


if __name__ == "__main__":
    main()
