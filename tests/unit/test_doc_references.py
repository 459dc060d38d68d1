"""Every reference to a Markdown page resolves: the page exists and its ``#anchor`` is a heading.

Code, tests, docs, experiment files, benchmarks and scripts point readers at pages such as
``docs/design.md#distribution-rules``, in Markdown links (``[text](neon-semantics.md#caching)``
in a page of ``docs/``) and in plain mentions (``see docs/data.md``). A page that is renamed, or a
heading that is reworded, would leave them pointing nowhere; this test scans every text file of
the repository (whatever pages exist: the list is not written down here) and fails on each
reference that does not resolve.

Resolution:

* a Markdown link inside a ``.md`` file is relative to that file's folder, as GitHub renders it;
* any other mention may be relative to the file's folder, to the repository root, or to
  ``docs/`` (docstrings that become ``docs/yaml.md`` link to their sibling pages);
* an anchor must be the slug of a heading of the target page (GitHub's rule: lower case,
  punctuation dropped, each space a hyphen, ``-1``, ``-2`` ... for repeats) or an explicit
  ``<a id="...">`` / ``<a name="...">``;
* output files that programs write and git ignores (the benchmark reports) are not pages;
* a section named in quotes after a README (``README "Topologies"``, ``benchmarks/README.md
  "Overlap"``, ``the README's "Commands"``) must begin a heading of that README (the one at the root
  when no folder is given).

It also fails on any mention of design notes that live outside the repository, and on ticket or
work-session numbers and work-tracking tags: every reference must be followed by someone who has
only the repository, and a comment says why, not which piece of work wrote it.
"""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MD = ".md"     # the examples below build page names from it, so that they are not references

#: Written by ``benchmarks/run.py`` into ``benchmarks/results/`` (ignored by git) and by
#: ``bin/gpu-check`` into its output folder; named by their bare file name in the code that writes
#: them, so no folder rule finds them.
GENERATED = {"latest.md", "latest-gpu.md", "bench.md"}

#: Folders that hold no sources of the repository even when git is not there to say so.
SKIP_DIRS = {".git", ".venv", "venv", "build", "dist", "runs", "__pycache__", ".pytest_cache",
             "node_modules"}

URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+")
LINK = re.compile(r"\]\(\s*<?([^)\s>]+?\.md)(#[^)\s>]*)?>?(?:\s+\"[^\"]*\")?\s*\)")
MENTION = re.compile(r"(?<![\w./-])((?:\.{1,2}/)*(?:[\w.-]+/)*[\w-][\w.-]*\.md)(#[\w-]+)?(?![\w/-])")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
QUOTED_SECTION = re.compile(r"((?:[\w.-]+/)*README(?:\.md)?)(?:'s)? \"([^\"]+)\"")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
# Spelled in pieces so that this file does not mention what it forbids.
FORBIDDEN = re.compile(r"\b(?:" + "DES" + r"IGN\b|" + "NE" + r"ON(?:\.md\b|\s*\u00a7))"
                       + r"|\.\./" + "sha" + r"red\b")

# An issue, session or ticket number ("issue" and "12", one space apart), and tags made of an "h"
# and a number or K-number.
WORK_TRACKING = re.compile(r"\b(?:[Ii]ssue|[Ss]ession|[Tt]icket)s? #?\d+\b|\bh(?:K\d+|\d{2}[a-z])\b")


def repository_files():
    """Paths (relative to ROOT) of the repository's files: git's tracked and untracked files
    that are not ignored, or a walk of the tree when there is no git checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=ROOT, capture_output=True, check=True).stdout
        files = [Path(p) for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = [p.relative_to(ROOT) for p in ROOT.rglob("*")
                 if p.is_file() and not SKIP_DIRS.intersection(p.relative_to(ROOT).parts)]
    return sorted(p for p in files if (ROOT / p).is_file())


def read_text(path):
    """The file's text, or None for binary files."""
    data = (ROOT / path).read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


TEXTS = {p: t for p in repository_files() if (t := read_text(p)) is not None}


def github_slug(heading):
    """The anchor GitHub gives a heading: its text without Markdown markup, lower case, every
    character that is not a letter, digit, ``_``, ``-`` or space dropped, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)      # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)                              # inline HTML tags
    text = text.replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(text):
    """The text of every heading of a Markdown page (fenced code blocks skipped)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            out.append(m.group(2))
    return out


def anchors(text):
    """Every anchor of a Markdown page: heading slugs (repeats numbered as GitHub does) and
    explicit HTML anchors."""
    found, seen = set(HTML_ANCHOR.findall(text)), {}
    for heading in headings(text):
        slug = github_slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


_anchor_cache = {}


def page_anchors(path):
    if path not in _anchor_cache:
        _anchor_cache[path] = anchors((ROOT / path).read_text(encoding="utf-8"))
    return _anchor_cache[path]


def references(path, text):
    """``(line, target, anchor, is_link)`` for every page reference in ``text``."""
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        line = URL.sub(" ", line)
        links = set()
        if path.suffix == ".md":
            for m in LINK.finditer(line):
                out.append((i, m.group(1), (m.group(2) or "")[1:], True))
                links.add(m.span(1)[0])
        for m in MENTION.finditer(line):
            if m.start(1) not in links:
                out.append((i, m.group(1), (m.group(2) or "")[1:], False))
    return out


def resolve(path, target, is_link):
    """The referenced page relative to ROOT, or None when it does not exist."""
    folders = [path.parent] if is_link else [path.parent, Path("."), Path("docs")]
    for folder in folders:
        candidate = (ROOT / folder / target.lstrip("/")).resolve()
        if candidate.is_file() and ROOT in candidate.parents:
            return candidate.relative_to(ROOT)
    return None


def quoted_section_problems():
    bad = []
    for path, text in TEXTS.items():
        for i, line in enumerate(text.splitlines(), 1):
            for m in QUOTED_SECTION.finditer(line):
                name = m.group(1) if m.group(1).endswith(".md") else m.group(1) + ".md"
                page = next((ROOT / f / name for f in (Path("."), path.parent)
                             if (ROOT / f / name).is_file()), None)
                titles = [] if page is None else headings(page.read_text(encoding="utf-8"))
                wanted = m.group(2).lower()
                if not any(t.replace("`", "").lower().startswith(wanted) for t in titles):
                    bad.append(f"{path}:{i}: {m.group(0)}: no such section")
    return bad


def problems():
    bad = []
    for path, text in TEXTS.items():
        for line, target, anchor, is_link in references(path, text):
            where = f"{path}:{line}: {target}{'#' + anchor if anchor else ''}"
            page = resolve(path, target, is_link)
            if page is None:
                if Path(target).name not in GENERATED:
                    bad.append(f"{where}: no such file")
            elif anchor and anchor not in page_anchors(page):
                bad.append(f"{where}: {page} has no heading with that anchor")
    return bad


def test_the_scan_sees_the_repository():
    assert Path("docs/design.md") in TEXTS and Path("tests/unit/test_doc_references.py") in TEXTS


def test_every_page_reference_resolves():
    bad = problems() + quoted_section_problems()
    assert not bad, "references that do not resolve:\n  " + "\n  ".join(bad)


def test_no_reference_to_notes_outside_the_repository():
    bad = [f"{path}:{i}: {line.strip()}" for path, text in TEXTS.items()
           for i, line in enumerate(text.splitlines(), 1) if FORBIDDEN.search(line)]
    assert not bad, "mentions of documents that are not in the repository:\n  " + "\n  ".join(bad)


@pytest.mark.parametrize("heading, slug", [
    ("Distribution rules", "distribution-rules"),
    ("`weight_init`", "weight_init"),
    ("neon's distributed design", "neons-distributed-design"),
    ("Run of 2026-11-22 08:22 UTC (Intel)", "run-of-2026-11-22-0822-utc-intel"),
    ("CIFAR-10", "cifar-10"),
    (f"[Overlap](x{MD}) of halos", "overlap-of-halos"),
])
def test_github_slug(heading, slug):
    assert github_slug(heading) == slug


def test_anchor_rules():
    text = "# A\n## A\n```\n# not a heading\n```\n<a id=\"here\"></a>\n### B ###\n"
    assert anchors(text) == {"a", "a-1", "here", "b"}
    refs = references(Path(f"docs/x{MD}"), f"see [t](../R{MD}#x), docs/d{MD} and "
                                           f"https://example.org/y{MD}; a{MD}#b.")
    assert [(r[1], r[2], r[3]) for r in refs] == [(f"../R{MD}", "x", True),
                                                  (f"docs/d{MD}", "", False), (f"a{MD}", "b", False)]


def test_no_ticket_numbers_or_work_tags():
    bad = [f"{path}:{i}: {line.strip()}" for path, text in TEXTS.items()
           for i, line in enumerate(text.splitlines(), 1) if WORK_TRACKING.search(line)]
    assert not bad, ("ticket or session numbers and work tags (say the reason instead):\n  "
                     + "\n  ".join(bad))
