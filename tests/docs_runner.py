"""Docs-test runner: extracts the shell blocks of README.md, docs/**/*.md and configs/*.md, runs them
and compares what they print with what the page shows. Chinese pages (docs/zh/, *.zh.md) are not run:
their shell blocks must equal their English page's, so the commands are tested once.

Convention (docs/docs-test.md says it for page authors):

* a fenced block whose info string is ``sh`` runs as written; what it prints is not compared;
* a ``console`` block runs its ``$ `` lines (a trailing backslash continues a command); the lines
  after a command, up to the next ``$ `` line, are what that command prints (stdout and stderr
  together) and ARE compared: ``...`` inside a line matches any text, a line that is only ``...``
  matches any number of lines, trailing spaces and blank lines at the ends do not count; a command
  with no lines after it is not compared;
* ``text`` (or any other info string) is never run;
* ``<!-- docs-test: skip -->`` on the line right before a shell block keeps that block out.

All runnable blocks of a page run in order in ONE bash session (``set -euo pipefail``) whose working
directory looks like the clone (a fresh temporary directory holding a symlink to each top-level entry
of the repository, so ``configs/...`` and ``.venv/bin/rmq`` work as written while new files stay in
the temporary directory), with ``TMPDIR`` inside it, ``.venv/bin`` first on PATH, ``$REPO`` naming
the clone and ``COLUMNS=200`` (tables do not wrap); stdin is /dev/null. A failing command fails the page.
Process groups the page leaves behind are killed when it ends.
"""
from __future__ import annotations

import difflib
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

RUN_INFO = {"sh", "console"}
SKIP_MARK = "<!-- docs-test: skip -->"
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")


@dataclass
class Command:
    text: str
    line: int                      # 1-based line of the command in the page
    expected: list[str] = field(default_factory=list)


@dataclass
class Block:
    page: str
    line: int          # 1-based line of the opening fence
    info: str
    commands: list[Command] = field(default_factory=list)
    skipped: bool = False


def is_translation(path: Path, repo: Path) -> bool:
    """A Chinese page: docs/zh/**, or a ``*.zh.md`` beside its English page."""
    rel = path.relative_to(repo).parts
    return path.name.endswith(".zh.md") or rel[:2] == ("docs", "zh")


def page_paths(repo: Path) -> list[Path]:
    """Every English page the docs test covers, by glob (new pages join by existing). Translations
    are left out: their commands are the English page's, byte for byte (translation_of)."""
    found = [repo / "README.md"] if (repo / "README.md").exists() else []
    found += sorted((repo / "docs").glob("**/*.md"))
    found += sorted((repo / "configs").glob("*.md"))
    return [p for p in found if not is_translation(p, repo)]


def translation_of(page: Path, repo: Path) -> Path:
    """Where the Chinese counterpart of an English page lives: docs/X.md -> docs/zh/X.md,
    anything else -> X.zh.md beside it (README.zh.md, configs/cluster-2b-2n.zh.md)."""
    rel = page.relative_to(repo)
    if rel.parts[0] == "docs":
        return repo / "docs" / "zh" / Path(*rel.parts[1:])
    return page.with_name(page.name[:-3] + ".zh.md")


def translation_paths(repo: Path) -> list[Path]:
    found = sorted((repo / "docs" / "zh").glob("**/*.md")) + sorted(repo.glob("*.zh.md"))
    return found + sorted((repo / "configs").glob("*.zh.md"))


def shell_blocks_text(text: str, page: str = "<page>") -> list[tuple[str, bool, str]]:
    """The runnable blocks of a page as (info, skipped, body) - what a translation must keep."""
    return [(b.info, b.skipped, "\n".join(c.text + "\n" + "\n".join(c.expected) for c in b.commands))
            for b in extract_blocks(text, page)]


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
            if info == "console":
                blk.commands = _commands(body, i + 2)
            else:
                blk.commands = [Command("\n".join(body), i + 2)]
            blocks.append(blk)
        i = j + 1
    return blocks


def _commands(body: list[str], first_line: int) -> list[Command]:
    cmds: list[Command] = []
    cont = False
    for n, ln in enumerate(body, start=first_line):
        if cont:
            cmds[-1].text += "\n" + ln
            cont = ln.rstrip().endswith("\\")
        elif ln.startswith("$ "):
            cmds.append(Command(ln[2:], n))
            cont = ln.rstrip().endswith("\\")
        elif cmds:
            cmds[-1].expected.append(ln)
    return cmds


def _trim(lines: list[str]) -> list[str]:
    out = [ln.rstrip() for ln in lines]
    while out and not out[0]:
        out.pop(0)
    while out and not out[-1]:
        out.pop()
    return out


def output_matches(expected: list[str], actual: str) -> bool:
    """Does ``actual`` match the page's lines? ``...`` in a line: any text; a line ``...``: any lines."""
    parts = []
    for ln in _trim(expected):
        if ln.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append("[^\n]*?".join(re.escape(piece) for piece in ln.split("...")) + r"\n")
    text = "".join(a + "\n" for a in _trim(actual.splitlines()))
    return re.fullmatch("".join(parts), text) is not None


def build_script(blocks: list[Block], outdir: str = "$__DOCS_OUT") -> str:
    """One bash script for a page: every runnable block in order. A compared command's output goes
    to ``outdir/N.out`` (N = its index in :func:`compared_commands`); everything else to the page log."""
    out = ["set -euo pipefail",
           # a failing compared command: show what it printed before the shell exits
           f"trap '[ -n \"${{__K:-}}\" ] && cat \"{outdir}/$__K.out\" >&2' EXIT"]
    k = 0
    for b in blocks:
        if b.skipped:
            continue
        out.append(f"echo '--- docs-test: {b.page}:{b.line} ({b.info})' >&2")
        for c in b.commands:
            if b.info == "console":
                out.append(f"printf '%s\\n' {shlex.quote('$ ' + c.text.splitlines()[0])} >&2")
                out.append(f"__K={k}")
                out.append(f"{{ {c.text}\n}} > \"{outdir}/{k}.out\" 2>&1 < /dev/null")
                out.append(f"__K=; cat \"{outdir}/{k}.out\" >&2")
                k += 1
            else:
                out.append(c.text)
    return "\n".join(out) + "\n"


def compared_commands(blocks: list[Block]) -> list[Command]:
    return [c for b in blocks if not b.skipped and b.info == "console" for c in b.commands]


@dataclass
class PageResult:
    page: str
    returncode: int
    output: str
    ran: int
    mismatches: list[str] = field(default_factory=list)
    tmp: str = ""                  # the page's temporary directory (gone once the run is over)

    def report(self, tail: int = 4000) -> str:
        head = f"{self.page}: exit {self.returncode}, {len(self.mismatches)} output mismatch(es)"
        return "\n".join([head, *self.mismatches, "--- page log (tail) ---", self.output[-tail:]])


def run_page(path: Path, repo: Path, timeout: float = 120.0) -> PageResult:
    """Run a page's blocks in one bash session in a fresh temp dir; compare; kill what it left behind."""
    blocks = extract_blocks(path.read_text(encoding="utf-8"), str(path))
    return _run(path, repo, blocks, timeout)


def _run(path: Path, repo: Path, blocks: list[Block], timeout: float, keep: dict | None = None) -> PageResult:
    runnable = [b for b in blocks if not b.skipped]
    if not runnable:
        return PageResult(str(path), 0, "", 0)
    script = build_script(blocks)
    env = dict(os.environ)
    env["PATH"] = f"{repo / '.venv' / 'bin'}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["REPO"] = str(repo)
    env["COLUMNS"] = "200"
    env["PYTHONUNBUFFERED"] = "1"
    for var in ("NAMESRV_ADDR", "PYTEST_CURRENT_TEST", "VIRTUAL_ENV"):
        env.pop(var, None)
    with tempfile.TemporaryDirectory(prefix="rmq-docs-") as tmp:
        tmp = os.path.realpath(tmp)
        outdir = Path(tmp) / ".docs-out"
        outdir.mkdir()
        env["__DOCS_OUT"] = str(outdir)
        env["TMPDIR"] = tmp
        work = Path(tmp) / "clone"
        work.mkdir()
        for entry in repo.iterdir():       # the page runs "from the clone", but writes stay in tmp
            if entry.name != ".git":
                (work / entry.name).symlink_to(entry)
        proc = subprocess.Popen(["bash", "-c", script], cwd=work, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            out, _ = proc.communicate()
            rc, out = -1, out + f"\n[docs-test] {path} timed out after {timeout:.0f}s"
        finally:
            _kill_group(proc.pid)
        mismatches = []
        for k, cmd in enumerate(compared_commands(blocks)):
            f = outdir / f"{k}.out"
            if not f.exists():
                break
            actual = f.read_text(encoding="utf-8", errors="replace")
            if keep is not None:
                keep[k] = actual
            if _trim(cmd.expected) and not output_matches(cmd.expected, actual):
                diff = difflib.unified_diff(_trim(cmd.expected), _trim(actual.splitlines()),
                                            "page", "actual", lineterm="", n=2)
                mismatches.append(f"{path}:{cmd.line}: `{cmd.text.splitlines()[0]}` printed something else:\n"
                                  + "\n".join(diff))
    res = PageResult(str(path), rc, out, len(runnable), mismatches)
    res.tmp = tmp
    return res


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
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# ------------------------------------------------------------------------------------ capture
# What varies from run to run, replaced by '...' when a page's outputs are captured: times and
# dates, epoch milliseconds, msgIds (32 hex digits), ephemeral ports, pids in client ids, durations.
VARYING = [
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,6})?\b"), "..."),
    (re.compile(r"\b\d{2}:\d{2}:\d{2}(?:[.,]\d{1,6})?\b"), "..."),
    (re.compile(r"\b1[78]\d{11}\b"), "..."),
    (re.compile(r"\b\d{17}\b"), "..."),                       # index file names (yyyyMMddHHmmssSSS)
    (re.compile(r"\b[0-9A-F]{32}\b"), "..."),
    (re.compile(r"(127\.0\.0\.1|localhost):\d{2,5}\b"), r"\1:..."),
    (re.compile(r"(@[\w.-]+-)\d+\b"), r"\1..."),
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}@"), "...@"),          # a client id starts with the host's address
    (re.compile(r"\b(born\+\d+)\.\d+s\b"), r"\1...s"),           # delivery delays, to the tenth
    (re.compile(r"\b(in|after|took) \d+(?:\.\d+)? ?(s|ms)\b"), r"\1 ...\2"),
]


def normalize(text: str, tmp: str) -> str:
    """Actual output -> the page's form: the page's temp dir and what VARYING lists become '...'."""
    out = text.replace(tmp, "...")
    out = re.sub(r"\.\.\./tmp\.\w+", "...", out)          # mktemp -d inside the page's TMPDIR
    for pat, rep in VARYING:
        out = pat.sub(rep, out)
    return re.sub(r"(\.\.\.)([ \t]*\.\.\.)+", r"\1", out)


def capture_page(path: Path, repo: Path, timeout: float = 300.0) -> tuple[str, PageResult]:
    """Run a page and return its text with every compared console command's lines replaced by what
    it printed, normalized. For page authors: review the diff, keep what teaches, and say in prose
    what the '...' stand for. `python -m tests.docs_runner capture PAGE` rewrites PAGE in place."""
    text = path.read_text(encoding="utf-8")
    blocks = extract_blocks(text, str(path))
    outputs: dict[int, str] = {}
    res = _run(path, repo, blocks, timeout, keep=outputs)
    lines = text.splitlines()
    # replace bottom-up so earlier line numbers stay valid
    cmds = compared_commands(blocks)
    for k in sorted(outputs, reverse=True):
        cmd = cmds[k]
        start = cmd.line - 1 + len(cmd.text.splitlines())      # first line after the command
        end = start + len(cmd.expected)
        new = normalize(outputs[k], res.tmp).rstrip("\n").splitlines()
        lines[start:end] = new + ([""] if cmd.expected and not cmd.expected[-1].strip() else [])
    return "\n".join(lines) + "\n", res


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="Run the docs test on pages, or capture a page's outputs.")
    ap.add_argument("mode", choices=["run", "capture"])
    ap.add_argument("pages", nargs="+")
    args = ap.parse_args()
    root = Path(__file__).resolve().parent.parent
    rc = 0
    for p in args.pages:
        if args.mode == "capture":
            new, res = capture_page(Path(p).resolve(), root)
            Path(p).write_text(new, encoding="utf-8")
            print(f"{p}: captured (exit {res.returncode})")
            if res.returncode:
                print(res.output[-3000:])
                rc = 1
        else:
            res = run_page(Path(p).resolve(), root)
            print(res.report() if (res.returncode or res.mismatches) else f"{p}: ok ({res.ran} block(s))")
            rc |= bool(res.returncode or res.mismatches)
    sys.exit(rc)
