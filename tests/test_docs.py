"""What users read cites the papers and privtd's own docs, and its section links resolve.

"SPEC" is the team's internal restatement of the papers; users have no copy of it, so no
docstring, comment, message or doc may point to it. Links of the form
``docs/algorithms.md#section`` (and every ``X.md#section`` between the docs) must name a heading
that exists, with GitHub's slugs, so a renamed heading cannot leave a dead link behind.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SPEC_WORD = re.compile(r"\bSPEC\b")


def user_facing_files() -> list[Path]:
    """Every text file a user meets: the package (code, templates, static pages, migrations),
    the docs and the README."""
    files = [ROOT / "README.md"]
    for base in (ROOT / "src" / "privtd", DOCS):
        for path in sorted(base.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                files.append(path)
    return files


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:  # bundled binary data (none cites anything)
        return None


def spec_citations(path: Path, text: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if not SPEC_WORD.search(line):
            continue
        found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_no_spec_citation_where_users_read() -> None:
    found: list[str] = []
    for path in user_facing_files():
        text = _text(path)
        if text is not None:
            found += spec_citations(path, text)
    assert not found, "Cite the paper or docs/algorithms.md#section instead of SPEC:\n" + "\n".join(
        found
    )


def test_spec_pattern_is_a_case_sensitive_word() -> None:
    assert SPEC_WORD.search("as SPEC A5 says") and SPEC_WORD.search("(SPEC)")
    assert not SPEC_WORD.search("a spec, SPECIFIC, INSPECT, SPEC_FILE")


def slug(heading: str, seen: Counter[str]) -> str:
    """GitHub's anchor for a heading: links and code marks dropped, lower case, punctuation
    other than '-' and '_' removed, spaces to '-', and '-1', '-2', ... for repeats."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
    n = seen[text]
    seen[text] += 1
    return text if n == 0 else f"{text}-{n}"


def anchors(path: Path) -> set[str]:
    seen: Counter[str] = Counter()
    out = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            out.add(slug(m.group(1), seen))
    return out


def test_slug_matches_github() -> None:
    seen: Counter[str] = Counter()
    assert slug("Dawid-Skene", seen) == "dawid-skene"
    assert slug("privtd's decisions", seen) == "privtds-decisions"
    assert (
        slug("Attack (`privtd attack PERTURBED --original ORIGINAL -M NAME`)", seen)
        == "attack-privtd-attack-perturbed---original-original--m-name"
    )
    assert slug("Dawid-Skene", seen) == "dawid-skene-1"


# ``docs/algorithms.md#crh`` from anywhere, ``algorithms.md#crh`` between docs, ``(#crh)`` within
# one doc. The target file is resolved against the docs folder.
LINK = re.compile(r"(?:docs/)?([\w-]+\.md)#([\w-]+)")
LOCAL = re.compile(r"\]\(#([\w-]+)\)")


def section_links() -> list[tuple[str, Path, str]]:
    """(where, target file, anchor) for every link into a section of a doc."""
    links = []
    for path in user_facing_files():
        text = _text(path)
        if text is None:
            continue
        is_doc = path.suffix == ".md"
        for number, line in enumerate(text.splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{number}"
            for m in LINK.finditer(line):
                target = DOCS / m.group(1)
                # Outside docs, only algorithms.md's sections are promised; between docs, all.
                if m.group(1) == "algorithms.md" or (is_doc and target.exists()):
                    links.append((where, target, m.group(2)))
            if is_doc:
                for m in LOCAL.finditer(line):
                    links.append((where, path, m.group(1)))
    return links


def test_section_links_resolve() -> None:
    links = section_links()
    assert any(t.name == "algorithms.md" for _, t, _ in links)  # the scan sees the links
    cache: dict[Path, set[str]] = {}
    dead = []
    for where, target, anchor in links:
        if not target.exists():
            dead.append(f"{where}: {target.name} does not exist")
            continue
        if target not in cache:
            cache[target] = anchors(target)
        if anchor not in cache[target]:
            dead.append(f"{where}: {target.name}#{anchor} names no heading")
    assert not dead, "Dead section links:\n" + "\n".join(dead)


@pytest.mark.parametrize(
    "section",
    [
        "majority-vote",
        "weighted-vote",
        "crh",
        "catd",
        "gtm",
        "dawid-skene",
        "one-coin-dawid-skene",
        "latent-class",
        "raykar",
        "p3-truth-inference",
        "private-dawid-skene",
        "one-layer",
        "two-layer",
        "binary-randomized-response",
        "exp-gaussian",
        "laplace",
        "randomized-response-with-null",
        "two-layer-with-null",
        "matrix-factorisation",
        "secure-protocol",
        "stopping-rules",
        "privtds-decisions",
        "papers",
    ],
)
def test_algorithm_reference_has_section(section: str) -> None:
    # Messages and docstrings link these; renaming one must be a deliberate change here too.
    assert section in anchors(DOCS / "algorithms.md")
