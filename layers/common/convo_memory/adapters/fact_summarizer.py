"""The embedded summarizer's fact keeper: deterministic, no network.

A summary is a list of facts, one per line, ``<Kind>: <what was said>``, grouped by
kind (most important first) and oldest first within a kind::

    Identity: my name is Ada Lovelace
    Id: where is order 12345?
    Date: it should arrive on March 14, 2024
    Goal: I want to return the blender
    Open question: can I still pay by card?

A fact is one sentence (or quoted phrase) of a message that carries something a later
turn needs: the user's identity and contact details, ids and order or reference numbers,
dates and times, stated goals, decisions, numbers with units, open questions. Anything
else is small talk: at most the newest few user sentences are kept, and they are the
first to go. When the budget is tight, the first fact of each kind and then the newest
ones survive longest; open questions and small talk only fill the room that is left.

The summarizer reads its own output back (``parse_summary``), so facts from earlier
summaries survive later folds; lines it did not write (an older summary format, a
model's summary) are read as text and their facts extracted again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

IDENTITY = "Identity"
CONTACT = "Contact"
ID = "Id"
DATE = "Date"
GOAL = "Goal"
DECISION = "Decision"
NUMBER = "Number"
QUESTION = "Open question"
MENTIONED = "Mentioned"
# Most important first: the order facts are shown in, and kept in under a tight budget.
KINDS: tuple[str, ...] = (IDENTITY, CONTACT, ID, DATE, GOAL, DECISION, NUMBER, QUESTION, MENTIONED)
SUBSTANTIVE: tuple[str, ...] = KINDS[:7]
MAX_QUESTIONS = 5
MAX_MENTIONED = 3
MAX_FACT_CHARS = 200
EMPTY_SUMMARY = "No facts to remember yet."
ELLIPSIS = "\u2026"

# -- patterns -------------------------------------------------------------------------

_SEGMENT_BREAK = re.compile(r"(?<=[.!?])\s+|[\r\n]+|[\"\u201c\u201d]")
_LINE = re.compile(r"^(" + "|".join(re.escape(kind) for kind in KINDS) + r"): (.+)$")
_ROLE_LINE = re.compile(r"^(user|assistant): (.*)$", re.IGNORECASE)

# Bounded repeats: a long run of word characters costs linear time, not quadratic.
_EMAIL = re.compile(r"[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63}){1,8}")
_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
_DATE = re.compile(
    "|".join(
        [
            r"\b\d{4}-\d{1,2}-\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?)?\b",
            r"\b\d{1,2}[/.]\d{1,2}[/.]\d{2,4}\b",
            rf"\b{_MONTH}\.?\s+\d{{1,2}}(?:st|nd|rd|th)?\b(?:,?\s+\d{{4}}\b)?",
            rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}\b\.?(?:,?\s+\d{{4}}\b)?",
            rf"\b{_MONTH}\s+\d{{4}}\b",
            r"\b\d{1,2}:\d{2}(?:\s?[ap]\.?m\b\.?)?",
            r"\b\d{1,2}\s?[ap]\.?m\b\.?",
            r"\b(?:mon|tues|wednes|thurs|fri|satur|sun)day\b",
        ]
    ),
    re.IGNORECASE,
)
_UNITS = (
    r"percent|kg|kgs|g|grams?|lbs?|pounds?|oz|ounces?|tons?|tonnes?|km|kms|kilomet(?:er|re)s?"
    r"|m|met(?:er|re)s?|cm|mm|mi|miles?|ft|feet|foot|inch(?:es)?|l|lit(?:er|re)s?|ml"
    r"|gallons?|gb|mb|tb|kb|usd|eur|gbp|chf|dollars?|euros?|bucks|cents?|items?|units?|pcs"
    r"|pieces?|boxes|bags?|bottles?|seats?|tickets?|nights?|days?|weeks?|months?|years?"
    r"|hours?|hrs?|minutes?|mins?|seconds?|secs?|people|persons?|adults?|children|kids"
    r"|guests?|rooms?"
)
_AMOUNT = r"\d[\d,]{0,15}(?:\.\d{1,6})?"  # bounded: no long backtracking on digit runs
_NUMBER = re.compile(
    rf"[$\u20ac\u00a3\u00a5]\s?{_AMOUNT}(?:\s?(?:k|m|bn|million|billion)\b)?"
    rf"|\b{_AMOUNT}\s?%"
    rf"|\b{_AMOUNT}\s?(?:{_UNITS})\b",
    re.IGNORECASE,
)
_ID_WORDS = re.compile(
    r"\b(?:orders?|tickets?|case|invoice|booking|reservation|account|acct|tracking"
    r"|reference|ref|confirmation|policy|customer|member(?:ship)?|locker|code|pin|id"
    r"|serial|claim|shipment|parcel|package|sku|item|room|flight|seat|transaction"
    r"|payment|receipt|request|incident|application|contract|subscription|loyalty|card"
    r"|phone|number|no)\b",
    re.IGNORECASE,
)
_TOKEN = re.compile(r"#?[A-Za-z0-9][A-Za-z0-9_/-]*[A-Za-z0-9]|#?\d")
_ORDINAL = re.compile(r"^\d+(?:st|nd|rd|th)$", re.IGNORECASE)
_YEAR = re.compile(r"^(?:19|20)\d{2}$")
# "I'm Ada", "call me Ada": the verb in any case, the name capitalized.
_NAME = re.compile(
    r"\b(?i:i'm|i\s+am|call\s+me|this\s+is)\s+(?!(?:"
    r"Not|Sorry|Fine|Good|Great|Here|Just|So|Very|Really|Looking|Trying|Going|The|A|An|It"
    r"|In|On|At|Back|Done|Ok|Okay|Also|Still|Now|Glad|Happy|Afraid|Sure|Interested"
    r")\b)[A-Z][a-z]+"
)
_NAME_IS = re.compile(r"\bmy name(?:'s|\s+is)\s+\w", re.IGNORECASE)
_GOAL = re.compile(
    r"\b(?:i\s+(?:really\s+|just\s+|still\s+)?(?:want|need|would\s+like|wish|hope|plan"
    r"|intend|prefer|must|have\s+to)|i'd\s+(?:like|love|prefer)"
    r"|i(?:'m|\s+am)\s+(?:looking\s+for|trying\s+to|hoping\s+to|planning\s+to|going\s+to)"
    r"|my\s+goal|the\s+goal\s+is|we\s+(?:want|need|would\s+like))\b",
    re.IGNORECASE,
)
_DECISION = re.compile(
    r"\b(?:let's|let\s+us|i'll|i\s+will|we'll|we\s+will|i've\s+decided|i\s+have\s+decided"
    r"|(?:i|we)\s+decided|i\s+choose|go\s+with|go\s+ahead|cancel(?:led|ed|ing|s)?"
    r"|confirm(?:ed|ing|s)?|approve[ds]?|book\s+it|sign\s+me\s+up|agreed|deal|decided)\b",
    re.IGNORECASE,
)


# -- facts ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    kind: str
    text: str

    @property
    def line(self) -> str:
        return f"{self.kind}: {self.text}"

    @property
    def key(self) -> str:
        """What makes two facts the same (an echo of the user's words is no new fact)."""
        return " ".join(self.text.casefold().split()).strip(" .!?,;:" + ELLIPSIS)


def _segments(content: str) -> list[str]:
    """Sentences and quoted phrases, each on one line."""
    content = content.replace("\u2019", "'")
    pieces = (" ".join(piece.split()) for piece in _SEGMENT_BREAK.split(content))
    return [piece.strip(" :;,-") for piece in pieces if any(c.isalnum() for c in piece)]


def _mask(text: str, *patterns: re.Pattern[str]) -> str:
    for pattern in patterns:
        text = pattern.sub(lambda m: " " * len(m.group(0)), text)
    return text


def _id_or_year(segment: str) -> tuple[int | None, int | None]:
    """Where the segment's first id and first bare year start (None: none)."""
    rest = _mask(segment, *((_EMAIL,) if "@" in segment else ()), _DATE, _NUMBER)
    first_year: int | None = None
    for match in _TOKEN.finditer(rest):
        token = match.group(0)
        digits = sum(c.isdigit() for c in token)
        if not digits or _ORDINAL.match(token):
            continue
        if _YEAR.match(token):
            first_year = match.start() if first_year is None else first_year
            continue
        letters = any(c.isalpha() for c in token)
        before = rest[max(0, match.start() - 40) : match.start()].split()[-3:]
        named = any(_ID_WORDS.fullmatch(word.strip(":#=,")) for word in before)
        if (
            token.startswith("#")
            or (letters and digits >= 2 and len(token) >= 4)
            or (not letters and digits >= 4)
            or (named and len(token) >= 3)
        ):
            # An id outranks a year: the rest of the segment cannot change its kind.
            return match.start(), first_year
    return None, first_year


def _kinds(role: str, segment: str) -> dict[str, int]:
    """The kinds of fact a segment carries, each with where its evidence starts."""
    user = role == "user"
    found: dict[str, int] = {}

    def note(kind: str, at: int | None) -> None:
        if at is not None and kind not in found:
            found[kind] = at

    if user:
        name = _NAME_IS.search(segment) or _NAME.search(segment)
        note(IDENTITY, name.start() if name else None)
    email = _EMAIL.search(segment) if "@" in segment else None
    note(CONTACT, email.start() if email else None)
    first_id, first_year = _id_or_year(segment)
    note(ID, first_id)
    date = _DATE.search(segment)
    note(DATE, date.start() if date else first_year)
    if user:
        goal = _GOAL.search(segment)
        note(GOAL, goal.start() if goal else None)
    decision = _DECISION.search(segment)
    # An assistant's question ("shall I cancel it?") offers a decision; it is not one.
    if decision and (user or not segment.endswith("?")):
        note(DECISION, decision.start())
    number = _NUMBER.search(segment)
    note(NUMBER, number.start() if number else None)
    if user and segment.endswith("?"):
        note(QUESTION, 0)
    if user and not found and len(segment.split()) >= 3:
        note(MENTIONED, 0)
    return found


def _clip(segment: str, at: int) -> str:
    """The segment, or the part of it around ``at`` when it is too long for a fact."""
    if len(segment) <= MAX_FACT_CHARS:
        return segment
    start = max(0, at - MAX_FACT_CHARS // 3)
    end = start + MAX_FACT_CHARS - 2
    piece = segment[start:end]
    if start > 0:
        piece = ELLIPSIS + piece.split(" ", 1)[-1]
    if end < len(segment):
        piece = piece.rsplit(" ", 1)[0] + ELLIPSIS
    return piece


def extract_facts(role: str, content: str) -> list[Fact]:
    """The facts one message states, in the order it states them."""
    facts: list[Fact] = []
    for segment in _segments(content):
        found = _kinds(role.lower(), segment)
        if not found:
            continue
        kind = next(k for k in KINDS if k in found)
        facts.append(Fact(kind, _clip(segment, found[kind])))
    return facts


def parse_summary(text: str | None) -> list[Fact]:
    """The facts of a previous summary: its own lines as they were written; any other
    line (an older format, a model's summary) read as text and its facts extracted."""
    facts: list[Fact] = []
    for raw in (text or "").splitlines():
        line = " ".join(raw.split())
        if not line or line == EMPTY_SUMMARY:
            continue
        own = _LINE.match(line)
        if own:
            facts.append(Fact(own.group(1), own.group(2)))
            continue
        spoken = _ROLE_LINE.match(line)
        role, content = (spoken.group(1), spoken.group(2)) if spoken else ("user", line)
        facts.extend(extract_facts(role, content))
    return facts


def merge(facts: Iterable[Fact]) -> list[Fact]:
    """Facts without repeats (the first statement stays), open questions and small talk
    cut to the newest few."""
    seen: set[str] = set()
    unique: list[Fact] = []
    for fact in facts:
        if fact.key and fact.key not in seen:
            seen.add(fact.key)
            unique.append(fact)
    limits = {QUESTION: MAX_QUESTIONS, MENTIONED: MAX_MENTIONED}
    keep: set[int] = set()
    for kind, limit in limits.items():
        of_kind = [i for i, f in enumerate(unique) if f.kind == kind]
        keep.update(of_kind[-limit:])
    return [f for i, f in enumerate(unique) if f.kind not in limits or i in keep]


def _keep_order(facts: Sequence[Fact]) -> list[Fact]:
    """The order facts claim the budget in: the first fact of each substantive kind,
    then the others newest first, one kind after another in turn, then open questions
    and small talk, newest first."""
    by_kind = {kind: [f for f in facts if f.kind == kind] for kind in KINDS}
    order = [by_kind[kind][0] for kind in SUBSTANTIVE if by_kind[kind]]
    queues = {kind: list(reversed(by_kind[kind][1:])) for kind in SUBSTANTIVE}
    while any(queues.values()):
        for kind in SUBSTANTIVE:
            if queues[kind]:
                order.append(queues[kind].pop(0))
    for kind in (QUESTION, MENTIONED):
        order.extend(reversed(by_kind[kind]))
    return order


def render(facts: Sequence[Fact], max_chars: int) -> str:
    """The facts as summary lines within ``max_chars``: grouped by kind, oldest first."""
    if max_chars <= 0:
        return ""
    chosen: set[int] = set()
    room = max_chars + 1  # every line costs its length plus a newline, but the last
    for fact in _keep_order(facts):
        cost = len(fact.line) + 1
        if cost <= room:
            chosen.add(id(fact))
            room -= cost
    if not chosen:
        first = _keep_order(facts)[:1]
        text = first[0].line if first else EMPTY_SUMMARY
        return text if len(text) <= max_chars else text[: max_chars - 1] + ELLIPSIS
    lines = [f.line for kind in KINDS for f in facts if f.kind == kind and id(f) in chosen]
    return "\n".join(lines)


def summarize_facts(
    previous: str | None, messages: Sequence[tuple[str, str]], max_chars: int
) -> str:
    """The previous summary's facts, then the new messages' facts, within ``max_chars``."""
    facts = parse_summary(previous)
    for role, content in messages:
        facts.extend(extract_facts(role, content))
    return render(merge(facts), max_chars)
