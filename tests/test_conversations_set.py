"""bench/conversations.py: the conversational retrieval set is built the same way every time
from the chitchat-dataset wheel, and its questions do what its docstring says (each names its
speaker, its evidence turns are that speaker's, a single-hop question has one evidence turn,
a multi-hop one several, a temporal one's evidence carries the session date)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("chitchat_dataset", reason="the conversations come from the chitchat-dataset wheel")

ROOT = Path(__file__).resolve().parent.parent


def _module():
    spec = importlib.util.spec_from_file_location("bench_conversations_set", ROOT / "bench" / "conversations.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_the_set_is_deterministic_and_its_questions_hold():
    cv = _module()
    a, b = cv.build(), cv.build(max_tenants=8)  # twice (the second only the first tenants: quicker)
    assert b.fingerprint() == a.only(list(range(8))).fingerprint()
    assert len(a.pairs) >= 40 and len(a.turns) > 40_000
    kinds = {q.kind for q in a.questions}
    assert kinds == {"single-hop", "multi-hop", "temporal"}
    for q in a.questions:
        assert q.speaker in q.text
        assert q.evidence
        for e in q.evidence:
            assert a.tenants[e] == q.tenant and a.speakers[e] == q.speaker
            assert re.match(r"\[\d{1,2} [A-Z][a-z]+ 2018\] " + q.speaker + ": ", a.turns[e])
        if q.kind == "single-hop" or q.kind == "temporal":
            assert len(q.evidence) == 1
        else:
            assert 2 <= len(q.evidence) <= cv.MAX_EVIDENCE
    sub = a.only([0, 4])
    assert set(sub.tenants) == {0, 1} and all(sub.turns[e] in a.turns for q in sub.questions for e in q.evidence)
