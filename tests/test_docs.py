"""Docs test: every sh/console block of README.md, docs/**/*.md and configs/*.md runs (tests/docs_runner.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs_runner import build_script, extract_blocks, page_paths, run_page

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
    assert blocks[0].commands == ["echo one", "echo two \\\n  three"]
    script = build_script(blocks)
    assert "false" not in script and "echo four" in script


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


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REPO).as_posix() for p in PAGES])
def test_page_runs(page):
    res = run_page(page, REPO, timeout=120)
    assert res.returncode == 0, f"{res.page}: a block failed (exit {res.returncode})\n{res.output[-4000:]}"
