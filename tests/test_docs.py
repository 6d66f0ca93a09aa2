"""The READMEs are reference: every repo path they name exists in the tree.

Checked in every README.md of the repository (bench/results/*.md too, the dated results files
the benchmarks write; each of those must also be linked from a README and hold only sections
headed by their date):

* markdown links ``[text](target)``: the target, relative to the README's folder, exists; a
  ``#anchor`` on a markdown file names one of its headings (GitHub's slugs);
* backticked paths: a backticked word of path characters that contains a slash and either ends
  in a file extension or in ``/``. It counts as a repo path when its first part is a folder or
  file of the tree, beside the README or at the root (``cache/`` in models/README.md is
  models/cache/, ``app/config.py`` anywhere is the root's app/); it then has to exist there.
  A path whose first part is nowhere in the tree (``vllm/engine/metrics.py``, another project's
  file) or that starts with ``/``, ``~`` or ``./`` (a user's file) is not checked, nor are the
  folders kvplan creates at run time (GENERATED).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".git", ".venv", "build", "var", "test-artifacts", "node_modules", "__pycache__"}
GENERATED = ("var/", "build/", "test-artifacts/")
"""Folders made at run time (git-ignored): `make demo`'s var/, mypy's build/, test screenshots."""

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
TICK = re.compile(r"`([^`\n]+)`")
PATHLIKE = re.compile(r"[A-Za-z0-9_.\-/]+")
EXTENSION = re.compile(r"\.[A-Za-z0-9]+$")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def readmes() -> list[Path]:
    out = []
    for p in ROOT.rglob("*.md"):
        rel = p.relative_to(ROOT)
        # hidden folders are tools' caches (.pytest_cache/README.md appears after a first run, so
        # the set of tests would differ between a fresh clone and the second stage of `make test`)
        if any(part in SKIP_DIRS or part.startswith(".") or part.endswith(".egg-info") for part in rel.parts):
            continue
        if p.name == "README.md" or rel.parts[:2] == ("bench", "results"):
            out.append(p)
    return sorted(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*|\[|\]\([^)]*\)", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(md: Path) -> set[str]:
    text = FENCE.sub("", md.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def broken_links(readme: Path) -> list[str]:
    text = readme.read_text(encoding="utf-8")
    bad = []
    for m in LINK.finditer(text):
        target = m.group(1) or m.group(2)
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (readme.parent / path).resolve() if path else readme
        if not dest.exists():
            bad.append(f"link {target}: no {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"link {target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return bad


def broken_paths(readme: Path) -> list[str]:
    text = FENCE.sub("", readme.read_text(encoding="utf-8"))
    bad = []
    for m in TICK.finditer(text):
        word = m.group(1)
        if not PATHLIKE.fullmatch(word) or "/" not in word:
            continue
        if not (EXTENSION.search(word) or word.endswith("/")):
            continue
        if word.startswith(("/", "~", "./", "../")) or word.startswith(GENERATED):
            continue
        first = word.split("/")[0]
        bases = [b for b in (readme.parent, ROOT) if (b / first).exists() and first not in SKIP_DIRS]
        if not bases:
            continue  # not a path of this tree
        if not any((b / word).exists() for b in bases):
            bad.append(f"`{word}`: not in the tree (looked beside the README and at the root)")
    return bad


RESULTS = ROOT / "bench" / "results"
DATED = re.compile(r"^## (\d{4})-(\d{2})-(\d{2}): \S", re.M)


def results_files() -> list[Path]:
    return sorted(RESULTS.glob("*.md"))


def linked_from_a_readme(results: Path) -> bool:
    """Some README.md (not a results file) links to `results` by a relative markdown link."""
    for readme in readmes():
        if readme.parent == RESULTS:
            continue
        for m in LINK.finditer(readme.read_text(encoding="utf-8")):
            target = (m.group(1) or m.group(2)).partition("#")[0]
            if target and not re.match(r"[a-z]+:", target) and (readme.parent / target).resolve() == results:
                return True
    return False


@pytest.mark.parametrize("results", results_files(), ids=lambda p: p.name)
def test_every_results_file_is_dated_and_linked(results: Path) -> None:
    """Each bench/results/<area>.md holds sections headed by their date (what bench/results.py
    writes: `## YYYY-MM-DD: `command``) and a README says what its figures mean by linking it."""
    text = FENCE.sub("", results.read_text(encoding="utf-8"))
    headings = re.findall(r"^## .*$", text, re.M)
    undated = [h for h in headings if not DATED.match(h)]
    assert headings and not undated, f"{results.name}: sections without a date: {undated or 'none at all'}"
    assert linked_from_a_readme(results), f"{results.name}: no README.md links to it"


def test_the_results_check_catches_an_undated_section() -> None:
    assert DATED.match("## 2026-12-01: `whatif_bench.py`")
    assert not DATED.match("## Re-measured on 2026-12-01")
    assert not DATED.match("## 2026-12-01")


@pytest.mark.parametrize("readme", readmes(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_readme_names_exists(readme: Path) -> None:
    bad = broken_links(readme) + broken_paths(readme)
    assert not bad, f"{readme.relative_to(ROOT)}:\n  " + "\n  ".join(bad)


def test_the_check_catches_a_missing_path(tmp_path: Path) -> None:
    """The checker itself: a README under the root naming a moved file and a dead link fails."""
    probe = ROOT / "tests" / "fixtures" / "_probe_README.md"
    probe.write_text(
        "See `collectors/settings.py` and `models/inputs/settings.py`, `vllm/x/y.py`,"
        " [x](../../app/nowhere.md), [y](../../README.md#no-such-heading).\n",
        encoding="utf-8",
    )
    try:
        bad = broken_links(probe) + broken_paths(probe)
    finally:
        probe.unlink()
    assert bad == [
        "link ../../app/nowhere.md: no app/nowhere.md",
        "link ../../README.md#no-such-heading: no heading #no-such-heading in README.md",
        "`collectors/settings.py`: not in the tree (looked beside the README and at the root)",
    ]


DATED_PASSAGE = re.compile(r"\b20\d\d-\d\d-\d\d\b|\b20\d\d-\d\d\b(?= change)|\bthis session\b|\blast session\b"
                           r"|\bissue \d+\b|\b[0-9a-f]{7,10}\b(?=[ ,)])", re.I)
"""A measurement of some afternoon in reference text: a date, a session, an issue number, a commit
hash. Command examples in code (fenced or in backticks) may carry dates."""


def dated_passages(text: str) -> list[str]:
    prose = TICK.sub("", FENCE.sub("", text))
    return [f"line {prose.count(chr(10), 0, m.start()) + 1}: {prose[max(0, m.start() - 40):m.end() + 20]!r}"
            for m in DATED_PASSAGE.finditer(prose) if not re.fullmatch(r"\d+", m.group(0))]


@pytest.mark.parametrize("readme", [r for r in readmes() if r.parent != RESULTS],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_readme_outside_bench_results_holds_a_dated_passage(readme: Path) -> None:
    """READMEs are reference (what the code does today); dated figures go to bench/results/."""
    bad = dated_passages(readme.read_text(encoding="utf-8"))
    assert not bad, f"{readme.relative_to(ROOT)}:\n  " + "\n  ".join(bad)


def test_the_dated_passage_check_sees_prose_but_not_code() -> None:
    assert dated_passages("Measured on 2026-12-02, 30 minutes.")
    assert dated_passages("as this session found")
    assert dated_passages("the fix (issue 27) and 42.6 s on main (a9598d1, before)")
    assert not dated_passages("`kvplan ingest --from 2026-11-01`\n```\nkvplan collect --day 2026-11-29\n```\n")
    assert not dated_passages("gpu_peak_flops = 989e12 and 1,024 MB")


FOLDER_READMES = ("app", "collectors", "deploy", "models", "sql")
MAX_README_WORDS = 3500
"""A folder README is reference a person reads in about 15 minutes: at most this many words
(`wc -w`'s count: runs of non-blank characters, code blocks included)."""


def words(text: str) -> int:
    return len(text.split())


@pytest.mark.parametrize("folder", FOLDER_READMES)
def test_each_folder_readme_is_read_in_fifteen_minutes(folder: str) -> None:
    readme = ROOT / folder / "README.md"
    n = words(readme.read_text(encoding="utf-8"))
    assert n <= MAX_README_WORDS, (f"{folder}/README.md: {n} words, more than {MAX_README_WORDS}; move dated"
                                   " figures to bench/results/ and cut repetition")


def test_the_word_count_is_wc_w() -> None:
    # counted by hand: 3 words on the first line, 2 in the fence (the fence markers are words too)
    assert words("One `two` three,\n```bash\nkvplan stats\n```\n") == 7
