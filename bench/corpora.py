"""Retrieval test sets built from text people wrote, installed from Debian's archive.

No package on PyPI or Debian ships a classic test collection (Cranfield, BEIR, SQuAD...)
inside itself: they all download at run time, which this project cannot do. Two sets are
built here from what Debian ships, each a *known-item* task: a short line a person wrote to
sum up a longer text is the query, and that longer text is the one right answer.

``debian``
    Debian's package descriptions (the English ``Translation-en`` index of bookworm ``main``,
    fetched by apt itself: ``apt-get update -o Acquire::Languages=en``). About 64k packages,
    whose maintainers wrote a one-line synopsis ("Real-time strategy game of ancient warfare")
    and a long description. Documents: the distinct long descriptions (~50k). Queries: the
    synopses of packages whose synopsis and long description are both their own (so each
    query has exactly one right answer).

``manpages``
    The Linux man-pages project's pages (Debian packages ``manpages`` and ``manpages-dev``:
    system calls, library functions, file formats, overviews). Documents: each page's
    DESCRIPTION section. Queries: the one-line summary of its NAME section ("open and
    possibly create a file"). Smaller (about 2k pages) and technical: a different test.

Both are deterministic for a given Debian release; a sample of queries is drawn with a fixed
seed. Nothing here is written by this project except the parsing.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import random
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

LISTS = Path("/var/lib/apt/lists")
HINT_DEBIAN = "run (as root) `apt-get update -o Acquire::Languages=en` to fetch Debian's English package descriptions"
HINT_MAN = "run (as root) `apt-get install -y manpages manpages-dev`"


class CorpusMissing(RuntimeError):
    pass


@dataclass
class Corpus:
    name: str
    source: str
    docs: list[str]
    """Document texts; a document's id is its index."""
    queries: list[str]
    relevant: list[set[int]]
    """For each query, the indexes of its right answers."""

    def fingerprint(self) -> str:
        h = hashlib.blake2b(digest_size=8)
        for d in self.docs:
            h.update(d.encode())
            h.update(b"\0")
        return h.hexdigest()

    def subset(self, n_docs: int, n_queries: int, seed: int = 11) -> Corpus:
        """``n_queries`` queries and a corpus of ``n_docs`` holding all their answers plus
        others drawn at random (a smaller haystack with the same kind of needles)."""
        rng = random.Random(seed)
        qs = sorted(rng.sample(range(len(self.queries)), min(n_queries, len(self.queries))))
        keep = set().union(*(self.relevant[q] for q in qs))
        others = [i for i in range(len(self.docs)) if i not in keep]
        keep |= set(rng.sample(others, max(0, min(len(others), n_docs - len(keep)))))
        order = sorted(keep)
        new = {old: new for new, old in enumerate(order)}
        return Corpus(
            self.name,
            self.source,
            [self.docs[i] for i in order],
            [self.queries[q] for q in qs],
            [{new[d] for d in self.relevant[q]} for q in qs],
        )


def _run_as_root(cmd: list[str], hint: str) -> None:
    if os.geteuid() != 0:
        raise CorpusMissing(hint)
    print(f"[corpus] {' '.join(cmd)}", file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def _translation_files() -> list[Path]:
    return sorted(LISTS.glob("*_dists_bookworm_main_i18n_Translation-en*"))


def _cat(path: Path) -> str:
    """apt's own helper decompresses whatever compression the index came in."""
    out = subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", str(path)], check=True, capture_output=True)
    return out.stdout.decode("utf-8", "replace")


def debian(n_queries: int = 1000, seed: int = 7, install: bool = True) -> Corpus:
    files = _translation_files()
    if not files and install:
        _run_as_root(["apt-get", "update", "-qq", "-o", "Acquire::Languages=en"], HINT_DEBIAN)
        files = _translation_files()
    if not files:
        raise CorpusMissing(HINT_DEBIAN)
    synopsis: dict[str, str] = {}
    body: dict[str, str] = {}
    for block in _cat(files[0]).split("\n\n"):
        m = re.search(r"^Package: (\S+)$", block, re.M)
        d = re.search(r"^Description-en: (.*)\n((?: .*\n?)*)", block, re.M)
        if not m or not d:
            continue
        lines = [ln[1:] for ln in d.group(2).splitlines()]
        # ' .' is an empty line in a Debian description
        text = " ".join("" if ln.strip() == "." else ln.strip() for ln in lines)
        text = re.sub(r"\s+", " ", text).strip()
        if len(text) < 40:
            continue
        synopsis[m.group(1)] = d.group(1).strip()
        body[m.group(1)] = text
    docs = sorted(set(body.values()))
    index = {t: i for i, t in enumerate(docs)}
    by_body: dict[str, int] = {}
    by_syn: dict[str, int] = {}
    for p in body:
        by_body[body[p]] = by_body.get(body[p], 0) + 1
        by_syn[synopsis[p].lower()] = by_syn.get(synopsis[p].lower(), 0) + 1
    eligible = sorted(
        p for p in body if by_body[body[p]] == 1 and by_syn[synopsis[p].lower()] == 1 and len(synopsis[p].split()) >= 2
    )
    picked = random.Random(seed).sample(eligible, min(n_queries, len(eligible)))
    return Corpus(
        "debian",
        f"Debian bookworm main Translation-en ({files[0].name}): {len(body)} packages",
        docs,
        [synopsis[p] for p in picked],
        [{index[body[p]]} for p in picked],
    )


_ESC = re.compile(r"\\f[BIRPC]|\\f\[[A-Z]*\]|\\\(em|\\\(en|\\&|\\c|\\e|\\\(.{2}|\\[*]\(.{2}|\\[*].")


def _roff_text(lines: list[str]) -> str:
    """Words of roff source, as a reader sees them (macros dropped, fonts unmarked)."""
    out: list[str] = []
    for ln in lines:
        if ln.startswith(('.\\"', "'\\\"")):
            continue
        if ln.startswith((".", "'")):
            name, _, rest = ln[1:].partition(" ")
            if name in ("B", "I", "BR", "BI", "IR", "IB", "RB", "RI", "SM", "SB", "TP", "IP", "SS", "UR", "MT"):
                ln = rest.replace('"', "")
            else:
                continue
        ln = _ESC.sub("", ln).replace("\\-", "-").replace("\\ ", " ")
        out.append(ln)
    return re.sub(r"\s+", " ", " ".join(out)).strip()


def _man_files() -> list[str]:
    try:
        out = subprocess.run(["dpkg", "-L", "manpages", "manpages-dev"], check=True, capture_output=True, text=True)
    except (subprocess.CalledProcessError, FileNotFoundError):
        return []
    return sorted(p for p in out.stdout.split() if re.search(r"/man/man[0-9]/[^/]+\.gz$", p))


def manpages(n_queries: int = 1000, seed: int = 7, install: bool = True) -> Corpus:
    files = _man_files()
    if not files and install:
        _run_as_root(["apt-get", "install", "-y", "-qq", "manpages", "manpages-dev"], HINT_MAN)
        files = _man_files()
    if not files:
        raise CorpusMissing(HINT_MAN)
    pages: list[tuple[str, str]] = []
    for f in files:
        if os.path.islink(f):
            continue  # another name for a page read under its own name
        with gzip.open(f, "rt", encoding="utf-8", errors="replace") as fh:
            src = fh.read().splitlines()
        if any(ln.startswith(".so ") for ln in src[:5]):
            continue  # a redirect to another page
        sections: dict[str, list[str]] = {}
        cur = None
        for ln in src:
            if ln.startswith(".SH"):
                cur = ln[3:].strip().strip('"').upper()
                sections.setdefault(cur, [])
            elif cur is not None:
                sections[cur].append(ln)
        name = _roff_text(sections.get("NAME", []))
        desc = _roff_text(sections.get("DESCRIPTION", []))
        summary = name.partition(" - ")[2].strip()
        if len(summary.split()) < 2 or len(desc) < 80:
            continue
        pages.append((summary, desc[:6000]))
    docs = sorted({d for _, d in pages})
    index = {t: i for i, t in enumerate(docs)}
    count: dict[str, int] = {}
    for s, _ in pages:
        count[s.lower()] = count.get(s.lower(), 0) + 1
    eligible = sorted({(s, d) for s, d in pages if count[s.lower()] == 1})
    picked = random.Random(seed).sample(eligible, min(n_queries, len(eligible)))
    return Corpus(
        "manpages",
        f"Debian packages manpages + manpages-dev: {len(pages)} pages with a NAME summary and a DESCRIPTION",
        docs,
        [s for s, _ in picked],
        [{index[d]} for _, d in picked],
    )


CORPORA = {"debian": debian, "manpages": manpages}
