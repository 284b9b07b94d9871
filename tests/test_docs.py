"""Docs test: every sh/console block of README.md, docs/**/*.md and configs/*.md runs (tests/docs_runner.py)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.docs_runner import (build_script, extract_blocks, output_matches, page_paths, run_page, shell_blocks_text,
                               translation_of, translation_paths)

REPO = Path(__file__).resolve().parent.parent
PAGES = page_paths(REPO)


def test_pages_are_found_by_glob():
    names = {p.relative_to(REPO).as_posix() for p in PAGES}
    assert "README.md" in names and "docs/docs-test.md" in names
    assert any(n.startswith("configs/") for n in names)


def test_extract_console_sh_text_and_skip():
    page = "\n".join([
        "```console", "$ echo one", "one", "$ echo two \\", "  three", "two three", "```",
        "```text", "$ false", "```",
        "<!-- docs-test: skip -->", "```sh", "false", "```",
        "```sh", "echo four", "```",
    ])
    blocks = extract_blocks(page)
    assert [(b.info, b.skipped) for b in blocks] == [("console", False), ("sh", True), ("sh", False)]
    assert [c.text for c in blocks[0].commands] == ["echo one", "echo two \\\n  three"]
    assert [c.expected for c in blocks[0].commands] == [["one"], ["two three"]]
    assert blocks[0].commands[1].line == 4
    script = build_script(blocks)
    assert "false" not in script and "echo four" in script


def test_output_matching_rules():
    assert output_matches(["a", "b"], "a\nb\n")
    assert output_matches(["", "a  ", ""], "\na\n\n")            # ends and trailing spaces do not count
    assert not output_matches(["a", "b"], "a\nc\n")
    assert not output_matches(["a"], "a\nb\n")                     # an extra line is a drift
    assert output_matches(["port ...:... up"], "port 127.0.0.1:4242 up")
    assert not output_matches(["port ... up"], "port 1\n2 up")      # '...' in a line stays in the line
    assert output_matches(["head", "...", "tail"], "head\nx\ny\ntail")
    assert output_matches(["head", "...", "tail"], "head\ntail")
    assert not output_matches(["a.b"], "axb")                         # everything else is literal


def test_unclosed_fence_is_an_error():
    with pytest.raises(ValueError, match=r"x.md:1: fenced block never closed"):
        extract_blocks("```sh\necho hi\n", "x.md")


def test_breaking_a_command_fails_the_page(tmp_path):
    good = tmp_path / "good.md"
    good.write_text("```console\n$ rmq --help\nUsage: ...\n```\n")
    assert run_page(good, REPO, timeout=60).returncode == 0
    broken = tmp_path / "broken.md"
    broken.write_text("```console\n$ rmq no-such-command\n```\n```sh\necho never-reached\n```\n")
    res = run_page(broken, REPO, timeout=60)
    assert res.returncode != 0
    assert "No such command" in res.output and "never-reached" not in res.output


def test_output_drift_fails_the_page(tmp_path):
    page = tmp_path / "drift.md"
    page.write_text("```console\n$ .venv/bin/rmq --help\nUsage: rmq [OPTIONS] COMMAND [ARGS]...\n...\n```\n")
    res = run_page(page, REPO, timeout=60)
    assert res.returncode == 0 and res.mismatches == [], res.report()
    page.write_text("```console\n$ .venv/bin/rmq --help\nUsage: kafka [OPTIONS] COMMAND [ARGS]...\n...\n```\n")
    res = run_page(page, REPO, timeout=60)
    assert res.returncode == 0 and len(res.mismatches) == 1
    assert f"{page}:2:" in res.mismatches[0] and "-Usage: kafka" in res.mismatches[0]


def test_a_real_page_broken_on_purpose_fails(tmp_path):
    """Take a real page, change one command, and the docs test notices."""
    text = (REPO / "docs" / "docs-test.md").read_text()
    assert "$ rmq admin updateTopic -c DefaultCluster -t DocsDemo" in text
    page = tmp_path / "docs-test.md"
    page.write_text(text.replace("$ rmq admin updateTopic -c DefaultCluster -t DocsDemo",
                                 "$ rmq admin updateTopic -c NoSuchCluster -t DocsDemo"))
    res = run_page(page, REPO, timeout=120)
    assert res.returncode != 0 or res.mismatches, res.report()


# Pages mostly wait (delay levels, check-backs, lock expiry), so they run a few at a time: each
# page's own bash session, broker and temporary directory. Slow pages start first. The pages start
# when the session's collection is done (tests/conftest.py), so their waiting overlaps the rest of the
# suite; test_page_runs only collects each page's result. RMQ_DOCS_EARLY=0 starts them when the first
# test_page_runs runs instead.
DOCS_PARALLEL = int(os.environ.get("RMQ_DOCS_PARALLEL", "3"))
# longest first (seconds alone on the 2-core machine, loaded, 2026-11-27): spark 249, ordered 136 (a
# consumer lock has to expire), ha 93, transactions 83, filters 54, cluster-2b-2n 54, retry-dlq 52,
# delay 51, idempotence 36, demos 33, labs 31, security 26, broadcast 24
SLOW_FIRST = ["docs/spark.md", "docs/ordered.md", "docs/ha.md", "docs/transactions.md", "docs/filters.md",
              "configs/cluster-2b-2n.md", "docs/retry-dlq.md", "docs/delay.md", "docs/idempotence.md",
              "docs/demos.md", "docs/labs.md", "docs/security.md", "docs/broadcast.md"]
_pages: dict = {}


def start_pages(items) -> dict:
    """Submit every selected page (up to DOCS_PARALLEL at once, slow ones first), once per session;
    returns {page path: future of its PageResult}."""
    import concurrent.futures as cf
    if "futures" in _pages:
        return _pages["futures"]
    selected = [it.callspec.params["page"] for it in items
                if getattr(it, "originalname", "") == "test_page_runs" and hasattr(it, "callspec")]
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    selected.sort(key=lambda p: rank.get(p.relative_to(REPO).as_posix(), len(rank)))
    pool = cf.ThreadPoolExecutor(max_workers=max(1, DOCS_PARALLEL), thread_name_prefix="docs-page")
    _pages["pool"] = pool
    _pages["futures"] = {p: pool.submit(run_page, p, REPO, 600) for p in selected}   # a hang guard: spark.md takes 250 s loaded
    return _pages["futures"]


def stop_pages() -> None:
    """Session end: pages not started yet are dropped, running ones end (each has its timeout)."""
    pool = _pages.pop("pool", None)
    _pages.pop("futures", None)
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def page_runs(request):
    yield start_pages(request.session.items)


@pytest.mark.timeout(1800)      # the first one waits for pages started before it; each page has its own 600 s
@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REPO).as_posix() for p in PAGES])
def test_page_runs(page, page_runs):
    res = page_runs[page].result(timeout=1800)
    assert res.returncode == 0 and not res.mismatches, res.report()


def test_make_run_next_steps_work_as_printed(tmp_path):
    """`make run` prints three commands to try next; run exactly those against a broker on free ports."""
    import re
    make = (REPO / "Makefile").read_text()
    run_rule = make.split("\nrun:", 1)[1].split("\n\n", 1)[0]
    steps = re.findall(r'^\t@echo "  (\.venv/bin/rmq [^"]+)"$', run_rule, re.M)
    assert len(steps) == 3, run_rule
    start = (REPO / "docs" / "docs-test.md").read_text().split("```sh\nDEMO=", 1)[1].split("```", 1)[0]
    page = tmp_path / "make-run.md"
    page.write_text("```sh\nDEMO=" + start + "```\n```console\n" + "".join(f"$ {s}\n" for s in steps) + "```\n")
    res = run_page(page, REPO, timeout=120)
    assert res.returncode == 0, res.report()
    assert "SEND_OK" in res.output and "body='hello'" in res.output, res.output[-3000:]


# ------------------------------------------------------------------------------------ links
TRANSLATIONS = translation_paths(REPO)
TRAVEL = PAGES + TRANSLATIONS + sorted((REPO / "configs").glob("*.yaml"))


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REPO).as_posix() for p in PAGES])
def test_page_has_a_chinese_counterpart_with_the_same_commands(page):
    """Every English page has its Chinese page; the translation's sh/console blocks (commands, shown
    output, skip markers) are the English page's exactly, so running the English page tests both."""
    zh = translation_of(page, REPO)
    rel = zh.relative_to(REPO).as_posix()
    assert zh.exists(), f"{page.relative_to(REPO)} has no Chinese counterpart {rel}"
    text = zh.read_text(encoding="utf-8")
    assert re.search(r"[\u4e00-\u9fff]", text), f"{rel} holds no Chinese text"
    en_blocks = shell_blocks_text(page.read_text(encoding="utf-8"), str(page))
    zh_blocks = shell_blocks_text(text, rel)
    assert len(zh_blocks) == len(en_blocks), f"{rel}: {len(zh_blocks)} shell blocks, English has {len(en_blocks)}"
    for i, (a, b) in enumerate(zip(en_blocks, zh_blocks)):
        assert a == b, f"{rel}: shell block {i + 1} differs from the English page's"


def test_every_chinese_page_has_its_english_page():
    english = {translation_of(p, REPO) for p in PAGES}
    orphans = [p.relative_to(REPO).as_posix() for p in TRANSLATIONS if p not in english]
    assert not orphans, f"Chinese pages without an English page: {orphans}"


def test_translation_check_notices_a_changed_command():
    page = REPO / "docs" / "docs-test.md"
    text = page.read_text(encoding="utf-8")
    assert shell_blocks_text(text) == shell_blocks_text(text)
    assert shell_blocks_text(text) != shell_blocks_text(text.replace("-t DocsDemo", "-t DocsDemo2", 1))
    assert translation_of(REPO / "README.md", REPO) == REPO / "README.zh.md"
    assert translation_of(REPO / "docs" / "spark.md", REPO) == REPO / "docs" / "zh" / "spark.md"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    import re
    text = re.sub(r"[`*_]", lambda m: "_" if m.group(0) == "_" else "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    import re
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    explicit = set(re.findall(r'<a (?:id|name)="([^"]+)"', text))      # HTML anchors GitHub keeps
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*)$", text, re.M)} | explicit


@pytest.mark.parametrize("page", TRAVEL, ids=[p.relative_to(REPO).as_posix() for p in TRAVEL])
def test_pages_travel_with_the_repo(page):
    """No page points outside the clone: no ../shared, no SPEC or seed citations; every relative
    link names a file of the repository and, with #anchor, a heading of that file."""
    import re
    text = page.read_text(encoding="utf-8")
    for bad in ("../shared", "SPEC §", "seed 00", "seeds 00", "DEVELOPERS.md"):
        assert bad not in text, f"{page.name}: mentions {bad!r}, which is not in a clone"
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        assert dest.exists(), f"{page.name}: link {target!r} points to a missing file"
        assert REPO in dest.parents or dest == REPO, f"{page.name}: link {target!r} leaves the repository"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page.name}: link {target!r}: no heading with that anchor"


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REPO).as_posix() for p in PAGES])
def test_every_fence_says_what_it_is(page):
    """A bare ``` fence is ambiguous (is it a command to run?): every block names its kind
    (sh/console run; text, yaml, python, ... are read only)."""
    import re
    opening = False
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        m = re.match(r"^\s*(```+|~~~+)\s*(\S*)", line)
        if not m:
            continue
        if not opening:
            assert m.group(2), f"{page.name}:{n}: a fenced block without an info string (sh, console, text, ...)"
        opening = not opening


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REPO).as_posix() for p in PAGES])
def test_measured_figures_name_their_date_and_machine(page):
    """A table of measured rates says, just above it, when and on what it was measured."""
    import re
    lines = page.read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines):
        if line.startswith("|") and ("msgs/s" in line or "first pass" in line) and n + 1 < len(lines) \
                and re.fullmatch(r"\|?(\s*:?-+:?\s*\|)+\s*:?-*:?\s*", lines[n + 1]):
            above = "\n".join(lines[max(0, n - 12):n])
            assert re.search(r"\b20\d\d-\d\d-\d\d\b", above), f"{page.name}:{n + 1}: a figures table with no date above it"
            assert re.search(r"machine|vCPU|cores", above), f"{page.name}:{n + 1}: a figures table with no machine above it"
