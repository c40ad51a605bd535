"""A conversational retrieval set built from real multi-session chats shipped in a wheel.

Source: the BYU PCC lab's Chit-Chat Challenge (PyPI ``chitchat-dataset==0.9.0``, MIT): 7,168
text conversations that 1,315 people had with each other on a messaging platform in 2018,
every message with its sender (an opaque id) and time, every conversation with its start.
The wheel ships the data itself (``chitchat_dataset/dataset.json``, 40 MB); nothing is
downloaded. Install: ``pip install chitchat-dataset==0.9.0``.

Many pairs of people talked more than once, on different days: a pair's conversations are a
multi-session dialogue. The set takes the pairs with at least :data:`MIN_SESSIONS`
conversations (of two people, at least four turns each) on at least :data:`MIN_DAYS`
distinct days and at least :data:`MIN_TURNS` turns in all, the longest first; each pair is
one *tenant*. A *turn* is a run of consecutive messages from one sender, joined by spaces;
each turn is one memory whose subject is its speaker and whose text is
``"[8 May 2018] Alex: <the words>"``: the session's date and the speaker's name in the text.
The people are named by a fixed list of first names (:data:`NAMES`), chosen by a hash of
their id (the same person has the same name in every pair; the two of a pair always differ).

Questions are built deterministically from the turns, by fixed patterns over a speaker's own
first-person statements; nothing is written by hand or by a model except the patterns and
the question templates below. A question names the speaker and never contains the words it
asks for (except temporal ones, which name the event and ask its date, as people do):

``single-hop``
    an attribute a speaker stated about themself, stated exactly once in the tenant:
    "I'm from Boise" -> "Where is Alex from?"; "my favorite band is ..." -> "What is Alex's
    favorite band?"; "I'm majoring in ..." -> "What is Alex's major?" (:data:`SINGLE`). The
    evidence is that one turn.
``multi-hop``
    something a speaker said of themself several times, in two or more sessions: every turn
    where Alex says "I love/like/enjoy ..." -> "What does Alex like?"; "I've been to ..." ->
    "Where has Alex been?" (:data:`MULTI`). The evidence is all those turns (2 to
    :data:`MAX_EVIDENCE`); a question with more is dropped.
``temporal``
    an event a speaker reported in the past tense: "I went to the temple with my family" ->
    "When did Alex go to the temple with my family?" (:data:`PAST`, the verb put back in its
    base form; pronouns are left as spoken). The event must hold at least two content words
    and be reported once by that speaker; the evidence is that turn, whose text carries the
    session date that answers it.

A turn counts only when the pattern's slot holds a content word (not a pronoun or filler:
"I like that" is no statement of taste). The same construction on the same wheel gives the
same set (``Conversations.fingerprint``); ``--quick`` takes every fourth tenant of that order.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "chitchat-dataset==0.9.0"
HINT = f"pip install '{PACKAGE}' (its wheel ships the conversations)"

MIN_SESSIONS, MIN_DAYS, MIN_TURNS = 3, 3, 300
MAX_EVIDENCE = 6
MAX_TEMPORAL = 12

NAMES = (
    "Alex Bella Carlos Dana Eli Fiona Gabe Hana Ivan Jade Kofi Lena Marco Nora Omar Priya Quinn Rosa Sam Tara "
    "Umar Vera Wade Xena Yusuf Zoe Abby Ben Cleo Dev Emma Felix Gwen Hugo Iris Jonah Kira Liam Maya Nico "
    "Olive Pablo Ruby Silas Tess Uma Vince Willa Yara Zane"
).split()


class ConversationsMissing(RuntimeError):
    pass


@dataclass
class Question:
    tenant: int
    speaker: str
    text: str
    kind: str  # single-hop / multi-hop / temporal
    evidence: set[int]
    """Indexes into ``Conversations.turns``."""
    pattern: str


@dataclass
class Conversations:
    source: str
    turns: list[str] = field(default_factory=list)
    speakers: list[str] = field(default_factory=list)
    tenants: list[int] = field(default_factory=list)
    """For each turn: its tenant (a pair of people) and its speaker's name."""
    sessions: list[int] = field(default_factory=list)
    """For each turn: its session's index, unique across tenants."""
    dates: list[str] = field(default_factory=list)
    """For each turn: its session's date (ISO 8601; the dataset dates conversations, not messages)."""
    pairs: list[tuple[str, str]] = field(default_factory=list)
    """For each tenant: its two people's names."""
    questions: list[Question] = field(default_factory=list)

    def fingerprint(self) -> str:
        h = hashlib.blake2b(digest_size=8)
        for t in self.turns:
            h.update(t.encode())
            h.update(b"\0")
        for q in self.questions:
            h.update(f"{q.tenant}|{q.kind}|{q.text}|{sorted(q.evidence)}".encode())
        return h.hexdigest()

    def only(self, tenants: list[int]) -> Conversations:
        """The given tenants with their turns and questions, renumbered densely in that order."""
        t_new = {old: i for i, old in enumerate(tenants)}
        keep = sorted((i for i, t in enumerate(self.tenants) if t in t_new), key=lambda i: (t_new[self.tenants[i]], i))
        new = {old: i for i, old in enumerate(keep)}
        return Conversations(
            self.source,
            [self.turns[i] for i in keep],
            [self.speakers[i] for i in keep],
            [t_new[self.tenants[i]] for i in keep],
            [self.sessions[i] for i in keep],
            [self.dates[i] for i in keep],
            [self.pairs[t] for t in tenants],
            [
                Question(t_new[q.tenant], q.speaker, q.text, q.kind, {new[e] for e in q.evidence}, q.pattern)
                for q in self.questions
                if q.tenant in t_new
            ],
        )


# -- patterns -------------------------------------------------------------------------------
_STOP = set(
    """a an the this that these those it its it's them they he she him her his hers we us our you your yours i me
    my mine myself and or but so to of in on at for with from by as up out about into over just really very too
    also much many lot lots some any all more most than then there here what which who how when where why
    thing things stuff one ones something anything everything nothing be is are was were been being do does did
    have has had get got go going gonna wanna like yeah yes no not dont don't im i'm u ur lol haha well though
    good great pretty kind sort way time times well oh ok okay sure now still even""".split()
)
_SLOT = r"([a-z0-9][a-z0-9' -]*)"  # up to the sentence's end, a comma or a conjunction (cut below)
_CUT = re.compile(
    r"\b(?:and|but|so|because|cause|since|though|although|which|who|when|where|while|what|if|then|until|haha|lol)\b"
)
_NOT_FIRST = {"you", "you're", "youre", "that", "it", "this", "there", "how", "what", "why", "him", "her", "them"}
_MAX_SLOT_WORDS = 7

# (name, regex over a lowercased turn, question template; {S} the speaker, {1} the first group)
SINGLE: list[tuple[str, str, str]] = [
    ("from", r"\bi(?:'m| am|m) (?:originally )?from " + _SLOT, "Where is {S} from?"),
    ("grew-up", r"\bi (?:grew up|was born|was raised) in " + _SLOT, "Where did {S} grow up?"),
    ("live", r"\bi (?:currently )?live (?:in|on|at|near) " + _SLOT, "Where does {S} live?"),
    ("major", r"\b(?:my major is|i(?:'m| am|m) (?:majoring|double majoring) in) " + _SLOT, "What is {S}'s major?"),
    ("studying", r"\bi(?:'m| am|m) (?:studying|going to school for) " + _SLOT, "What is {S} studying?"),
    ("work-at", r"\bi work (?:at|for) " + _SLOT, "Where does {S} work?"),
    ("work-as", r"\bi work as (?:an? )?" + _SLOT, "What does {S} do for work?"),
    ("favorite", r"\bmy (?:favorite|favourite|fav|fave) ([a-z]+) (?:is|are|was|would be) " + _SLOT, None),
    (
        "how-many",
        r"\bi have (two|three|four|five|six|seven|eight|nine|ten|\d+) (?:little |older |younger |big )?"
        r"(brothers|sisters|siblings|kids|children|dogs|cats|roommates|sons|daughters)\b",
        None,
    ),
    ("age", r"\bi(?:'m| am|m) (\d\d) (?:years old|yrs old|now)\b", "How old is {S}?"),
    ("year", r"\bi(?:'m| am|m) (?:a|an) (freshman|sophomore|junior|senior)\b", "What year of school is {S} in?"),
    ("major", r"\bi(?:'m| am|m) (?:a|an) ([a-z]+(?: [a-z]+)?) major\b", "What is {S}'s major?"),
    ("job", r"\bmy job is " + _SLOT, "What is {S}'s job?"),
    ("dream", r"\bmy dream (?:job )?is " + _SLOT, "What is {S}'s dream?"),
    ("moving", r"\bi(?:'m| am|m) (?:moving|going to move) to " + _SLOT, "Where is {S} moving?"),
    (
        "pet",
        r"\bi have (?:a|an|two|three) (?:little |pet |new )?"
        r"(dogs?|cats?|puppy|kitten|hamster|fish|bird|rabbit|bunny)\b",
        "What pets does {S} have?",
    ),
    ("status", r"\bi(?:'m| am|m) (married|engaged|single)\b", "Is {S} married?"),
    ("mission", r"\bi served (?:my |a )?mission in " + _SLOT, "Where did {S} serve a mission?"),
    ("speak", r"\bi speak " + _SLOT, "What languages does {S} speak?"),
    ("birthday", r"\bmy birthday is " + _SLOT, "When is {S}'s birthday?"),
]

MULTI: list[tuple[str, str, str]] = [
    ("like", r"\bi (?:really |also |absolutely )?(?:love|like|enjoy) " + _SLOT, "What does {S} like?"),
    ("been-to", r"\bi(?:'ve| have|ve) (?:been to|visited|lived in) " + _SLOT, "Where has {S} been?"),
    ("play", r"\bi (?:also )?play(?:ed)? " + _SLOT, "What does {S} play?"),
    ("want", r"\bi (?:really )?(?:want|wanna|hope|plan) to " + _SLOT, "What does {S} want to do?"),
    ("plans", r"\bi(?:'m| am|m) (?:planning to|going to|gonna) " + _SLOT, "What is {S} planning to do?"),
    ("hate", r"\bi (?:really )?(?:hate|dislike|can't stand|cant stand) " + _SLOT, "What does {S} dislike?"),
]

PAST = {
    "went": "go",
    "saw": "see",
    "watched": "watch",
    "visited": "visit",
    "bought": "buy",
    "got": "get",
    "took": "take",
    "played": "play",
    "finished": "finish",
    "started": "start",
    "met": "meet",
    "ate": "eat",
    "made": "make",
    "ran": "run",
    "moved": "move",
    "tried": "try",
    "learned": "learn",
    "found": "find",
    "won": "win",
    "lost": "lose",
    "wrote": "write",
    "climbed": "climb",
    "hiked": "hike",
    "drove": "drive",
    "flew": "fly",
    "spent": "spend",
    "called": "call",
    "cooked": "cook",
    "baked": "bake",
    "read": "read",
    "joined": "join",
    "quit": "quit",
    "broke": "break",
    "celebrated": "celebrate",
    "listened": "listen",
    "graduated": "graduate",
}
_PAST_RE = re.compile(r"\bi (?:just |finally |recently |actually |also )?(" + "|".join(PAST) + r") " + _SLOT)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower().replace("\u2019", "'").replace("`", "'")).strip()


def _slot(raw: str) -> str | None:
    """The words a pattern captured, cut at the first conjunction and at a few words; None
    when they hold no content word."""
    raw = _CUT.split(raw, maxsplit=1)[0]
    words = [w for w in raw.replace("-", " ").split() if w][:_MAX_SLOT_WORDS]
    content = [w for w in words if w.strip("'") not in _STOP and not w.isdigit()]
    if not content:
        return None
    return " ".join(words)


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"[.!?;,:()\"\n]+", _norm(text)) if s.strip()]


def _single(speaker: str, text: str) -> list[tuple[str, str]]:
    """(key, question) of every single-hop pattern the turn states."""
    out = []
    for sent in _sentences(text):
        for name, rx, template in SINGLE:
            m = re.search(rx, sent)
            if not m:
                continue
            if name == "favorite":
                if _slot(m.group(2)) is None:
                    continue
                noun = m.group(1)
                if noun in _STOP or len(noun) < 3:
                    continue
                out.append((f"favorite:{noun}", f"What is {speaker}'s favorite {noun}?"))
            elif name == "how-many":
                out.append((f"how-many:{m.group(2)}", f"How many {m.group(2)} does {speaker} have?"))
            elif name in ("age", "year", "pet", "status") or _slot(m.group(1)) is not None:
                assert template is not None
                out.append((name, template.format(S=speaker)))
    return out


def _multi(text: str) -> list[str]:
    out = []
    for sent in _sentences(text):
        for name, rx, _ in MULTI:
            m = re.search(rx, sent)
            if m and _slot(m.group(1)) is not None:
                out.append(name)
    return out


_REL = re.compile(
    r"\bmy (mom|mother|dad|father|parents|brother|sister|siblings|wife|husband|girlfriend|boyfriend|roommate|"
    r"roommates|grandma|grandpa|grandparents|cousin|uncle|aunt|son|daughter|family|dog|cat|friends?) " + _SLOT
)


def _rel(text: str) -> list[str]:
    """The people (and pets) a turn says something about: "my sister just ..." -> sister."""
    out = []
    for sent in _sentences(text):
        for m in _REL.finditer(sent):
            if _slot(m.group(2)) is not None and m.group(1) not in out:
                out.append(m.group(1))
    return out


def _past(speaker: str, text: str) -> list[tuple[str, str]]:
    """(event key, question) of each past event the turn reports with two content words."""
    out = []
    for sent in _sentences(text):
        m = _PAST_RE.search(sent)
        if not m:
            continue
        event = _slot(m.group(2))
        if event is None or event.split()[0] in _NOT_FIRST or sum(1 for w in event.split() if w not in _STOP) < 2:
            continue
        verb = PAST[m.group(1)]
        out.append((f"{verb} {event}", f"When did {speaker} {verb} {event}?"))
    return out


# -- building ------------------------------------------------------------------------------
def _names(people: list[str]) -> dict[str, str]:
    """A name for each of a pair's two people: by a hash of their id, the second moved on
    when it would repeat the first."""
    out: dict[str, str] = {}
    for p in people:
        i = int(hashlib.blake2b(p.encode(), digest_size=4).hexdigest(), 16) % len(NAMES)
        while NAMES[i] in out.values():
            i = (i + 1) % len(NAMES)
        out[p] = NAMES[i]
    return out


def _date(start: str) -> tuple[str, str]:
    d = _dt.date.fromisoformat(start[:10])
    return d.isoformat(), f"{d.day} {d.strftime('%B')} {d.year}"


def dataset_path() -> Path:
    try:
        import chitchat_dataset  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ConversationsMissing(HINT) from exc
    return Path(chitchat_dataset.__file__).resolve().parent / "dataset.json"


def build(path: Path | None = None, max_tenants: int = 0) -> Conversations:
    path = path or dataset_path()
    data = json.loads(path.read_text(encoding="utf-8"))
    by_pair: dict[tuple[str, str], list[tuple[str, str, list]]] = defaultdict(list)
    for cid in sorted(data):
        c = data[cid]
        people = sorted({u["sender"] for m in c["messages"] for u in m})
        if len(people) != 2 or len(c["messages"]) < 4:
            continue
        by_pair[(people[0], people[1])].append((c["start"], cid, c["messages"]))
    chosen = []
    for pair, convs in by_pair.items():
        n_turns = sum(len(m) for _, _, m in convs)
        days = {s[:10] for s, _, _ in convs}
        if len(convs) >= MIN_SESSIONS and len(days) >= MIN_DAYS and n_turns >= MIN_TURNS:
            chosen.append((-n_turns, pair))
    chosen.sort()
    if max_tenants:
        chosen = chosen[:max_tenants]
    out = Conversations(
        f"{PACKAGE} ({path.name}): {len(chosen)} pairs of people with >= {MIN_SESSIONS} conversations "
        f"on >= {MIN_DAYS} days and >= {MIN_TURNS} turns"
    )
    session = 0
    for tenant, (_, pair) in enumerate(chosen):
        names = _names(list(pair))
        out.pairs.append((names[pair[0]], names[pair[1]]))
        single: dict[tuple[str, str], list[int]] = defaultdict(list)
        single_q: dict[tuple[str, str], str] = {}
        multi: dict[tuple[str, str], list[int]] = defaultdict(list)
        past: dict[tuple[str, str], list[int]] = defaultdict(list)
        past_q: dict[tuple[str, str], str] = {}
        rel: dict[tuple[str, str], list[int]] = defaultdict(list)
        for start, _, messages in sorted(by_pair[pair], key=lambda c: (c[0], c[1])):
            iso, spoken = _date(start)
            for m in messages:
                who = names[m[0]["sender"]]
                words = " ".join(u["text"].strip() for u in m if u["text"].strip())
                if not words:
                    continue
                i = len(out.turns)
                out.turns.append(f"[{spoken}] {who}: {words}")
                out.speakers.append(who)
                out.tenants.append(tenant)
                out.sessions.append(session)
                out.dates.append(iso)
                for key, q in _single(who, words):
                    if i not in single[(who, key)]:
                        single[(who, key)].append(i)
                    single_q[(who, key)] = q
                for key in _multi(words):
                    if i not in multi[(who, key)]:
                        multi[(who, key)].append(i)
                for key in _rel(words):
                    rel[(who, key)].append(i)
                for key, q in _past(who, words):
                    if i not in past[(who, key)]:
                        past[(who, key)].append(i)
                    past_q[(who, key)] = q
            session += 1
        for (who, key), ev in sorted(single.items()):
            if len(ev) == 1:
                out.questions.append(Question(tenant, who, single_q[(who, key)], "single-hop", set(ev), key))
        templates = {name: t for name, _, t in MULTI}
        for (who, key), ev in sorted(multi.items()):
            if 2 <= len(ev) <= MAX_EVIDENCE and len({out.sessions[i] for i in ev}) >= 2:
                out.questions.append(Question(tenant, who, templates[key].format(S=who), "multi-hop", set(ev), key))
        for (who, key), ev in sorted(rel.items()):
            if len(ev) <= MAX_EVIDENCE:
                kind = "single-hop" if len(ev) == 1 else "multi-hop"
                q = f"What did {who} say about their {key}?"
                out.questions.append(Question(tenant, who, q, kind, set(ev), f"my-{key}"))
        # an event reported once by its speaker; at most MAX_TEMPORAL of a tenant's (by a hash
        # of the question), so that one kind does not outweigh the others
        once = [(who, key) for (who, key), ev in past.items() if len(ev) == 1]
        once.sort(key=lambda wk: hashlib.blake2b(past_q[wk].encode(), digest_size=8).digest())
        for who, key in sorted(once[:MAX_TEMPORAL], key=lambda wk: past[wk][0]):
            out.questions.append(Question(tenant, who, past_q[(who, key)], "temporal", set(past[(who, key)]), "past"))
    return out


if __name__ == "__main__":
    import collections
    import sys

    c = build(max_tenants=int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    print(c.source)
    print(len(c.turns), "turns,", len(c.pairs), "tenants,", len(set(c.sessions)), "sessions")
    print(collections.Counter(q.kind for q in c.questions))
    print(collections.Counter(q.pattern for q in c.questions).most_common())
    print("fingerprint", c.fingerprint())
