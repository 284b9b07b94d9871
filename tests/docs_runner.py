"""Docs-test runner: extracts the shell blocks of README.md, docs/**/*.md and configs/*.md and runs them.

Convention (see docs/docs-test.md): a fenced block whose info string is ``sh`` or ``console`` runs;
``text`` (or anything else) is output or illustration and never runs; the line
``<!-- docs-test: skip -->`` right before a shell block keeps that block out (the page says why in
prose). In a ``console`` block, lines starting with ``$ `` are commands (a trailing backslash
continues a command on the next line); every other line is output and is not compared. All runnable
blocks of one page run in order in ONE bash session (``set -euo pipefail``), in a fresh temporary
directory, with the repository's ``.venv/bin`` first on PATH and ``$REPO`` naming the clone; any
command that fails fails the page. Background processes a page starts are killed when the page ends.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

RUN_INFO = {"sh", "console"}
SKIP_MARK = "<!-- docs-test: skip -->"
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")


@dataclass
class Block:
    page: str
    line: int          # 1-based line of the opening fence
    info: str
    commands: list[str] = field(default_factory=list)
    skipped: bool = False


def page_paths(repo: Path) -> list[Path]:
    """Every page the docs test covers, by glob (new pages join by existing)."""
    found = [repo / "README.md"] if (repo / "README.md").exists() else []
    found += sorted((repo / "docs").glob("**/*.md"))
    found += sorted((repo / "configs").glob("*.md"))
    return found


def extract_blocks(text: str, page: str = "<page>") -> list[Block]:
    """All fenced ``sh``/``console`` blocks of a page, in order, with their commands."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i].strip())
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2).lower()
        prev = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence[:3]):
            body.append(lines[j])
            j += 1
        if j >= len(lines):
            raise ValueError(f"{page}:{i + 1}: fenced block never closed")
        if info in RUN_INFO:
            blk = Block(page, i + 1, info, skipped=(prev == SKIP_MARK))
            blk.commands = _commands(body) if info == "console" else ["\n".join(body)]
            blocks.append(blk)
        i = j + 1
    return blocks


def _commands(body: list[str]) -> list[str]:
    cmds: list[str] = []
    cur: list[str] | None = None
    for ln in body:
        if cur is not None:
            cur.append(ln)
            if not ln.rstrip().endswith("\\"):
                cmds.append("\n".join(cur))
                cur = None
            continue
        if ln.startswith("$ "):
            cmd = ln[2:]
            if cmd.rstrip().endswith("\\"):
                cur = [cmd]
            else:
                cmds.append(cmd)
    if cur is not None:
        cmds.append("\n".join(cur))
    return cmds


def build_script(blocks: list[Block]) -> str:
    """One bash script for a page: every runnable block in order, each announced on stderr."""
    out = ["set -euo pipefail"]
    for b in blocks:
        if b.skipped:
            continue
        out.append(f"echo '--- docs-test: {b.page}:{b.line} ({b.info})' >&2")
        out.extend(b.commands)
    return "\n".join(out) + "\n"


@dataclass
class PageResult:
    page: str
    returncode: int
    output: str
    ran: int


def run_page(path: Path, repo: Path, timeout: float = 120.0) -> PageResult:
    """Run a page's blocks in one bash session in a fresh temp dir; kill what it left behind."""
    blocks = extract_blocks(path.read_text(encoding="utf-8"), str(path))
    runnable = [b for b in blocks if not b.skipped]
    if not runnable:
        return PageResult(str(path), 0, "", 0)
    script = build_script(blocks)
    env = dict(os.environ)
    env["PATH"] = f"{repo / '.venv' / 'bin'}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["REPO"] = str(repo)
    env.pop("NAMESRV_ADDR", None)
    with tempfile.TemporaryDirectory(prefix="rmq-docs-") as tmp:
        proc = subprocess.Popen(["bash", "-c", script], cwd=tmp, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            out, _ = proc.communicate()
            rc, out = -1, out + f"\n[docs-test] {path} timed out after {timeout:.0f}s"
        finally:
            _kill_group(proc.pid)
    return PageResult(str(path), rc, out, len(runnable))


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(50):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        import time
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
