"""`rmq lab list | show | run | report`: the labs as commands (plugged into `rmq` by labs.plugin)."""
from __future__ import annotations

import json
import os
import sys

import click

from .listing import echo_listing
from .runner import LabError, lab_files, load_lab, resolve, run_lab
from .schema import unfold_cjk


@click.group("lab")
def lab() -> None:
    """Run YAML experiments that compare the RocketMQ design with Kafka's on the same workload."""


@lab.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.option("--lang", type=click.Choice(["en", "zh"]), default="en", show_default=True)
def list_labs(as_json, lang) -> None:
    """The labs that ship with the project."""
    rows = []
    for f in lab_files():
        try:
            lb = load_lab(str(f))
            rows.append({"name": lb.name, "title": lb.title, "title_zh": lb.title_zh, "systems": [s.name for s in lb.systems],
                         "sweep": lb.sweep, "file": str(f)})
        except LabError as exc:
            rows.append({"name": f.stem, "error": str(exc)})
    echo_listing(rows, as_json, lang)


@lab.command("show")
@click.argument("name")
@click.option("--lang", type=click.Choice(["en", "zh"]), default="en", show_default=True)
def show(name, lang) -> None:
    """A lab's question, claim, systems, workload, sweep and verdict rule."""
    try:
        lb = load_lab(resolve(name))
    except LabError as exc:
        raise click.ClickException(str(exc))
    zh = lang == "zh"
    title, question, claim = ((lb.title_zh or lb.title, unfold_cjk(lb.question_zh or lb.question),
                               unfold_cjk(lb.claim_zh or lb.claim)) if zh else (lb.title, lb.question, lb.claim))
    vd = lb.verdict
    explain = ((unfold_cjk(vd.explain_zh or vd.explain)) if zh else vd.explain) if vd else "-"
    rule = (f"{vd.kind} of {vd.metric}, expected best: {vd.expect_best}, minimum effect {vd.min_effect:.0%}"
            if vd else "none (a workload, not a claim)")
    click.echo(f"{title}\n\nquestion: {question.strip()}\nsource:   seed {lb.source.seed}, {lb.source.section}\n"
               f"claim:    {claim.strip()}\nwhy:      {explain.strip()}\nsystems:  {', '.join(s.name for s in lb.systems)}\n"
               f"sweep:    {lb.sweep or '-'}\nverdict:  {rule}\nworkload: " +
               ", ".join(f"{k}={v}" for k, v in lb.workload.model_dump(exclude_defaults=True).items()))


@lab.command("run")
@click.argument("name_or_file")
@click.option("--quick", is_flag=True, help="Small and short: 5 s measured per point, 3 repeats (a few minutes on 2 cores; about 10 for topic-count).")
@click.option("--repeats", type=click.IntRange(min=1), default=None,
              help="Measurements per point and system (default 5, or 3 with --quick).")
@click.option("--lang", type=click.Choice(["en", "zh"]), default="en", show_default=True,
              help="The language of the reports (zh: Chinese, with a CJK font for the plots).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Where the results and reports go (default labs-out/NAME).")
@click.option("--systems", default=None, help="Comma-separated systems instead of the lab's own.")
def run(name_or_file, quick, repeats, lang, out_dir, systems) -> None:
    """Run a lab (a name from `rmq lab list`, a lab file, or an OMB workload file)."""
    import signal
    import threading

    from rich.console import Console

    def stopped(signum, _frame):   # unwinds through run_lab's cleanup: brokers, cgroups, loop device
        raise SystemExit(f"rmq lab run: stopped by signal {signum}; its brokers and conditions were removed")
    previous = signal.signal(signal.SIGTERM, stopped) if threading.current_thread() is threading.main_thread() \
        else None
    try:
        path = resolve(name_or_file)
        lb = load_lab(path, [s.strip() for s in systems.split(",") if s.strip()] if systems else None)
        out = out_dir or os.path.join("labs-out", lb.name)
        doc = run_lab(lb, out, quick=quick, base_dir=os.path.dirname(os.path.abspath(path)),
                      console=Console(stderr=True), repeats=repeats, lang=lang)
    except LabError as exc:
        raise click.ClickException(str(exc))
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    text = doc["verdict"]["text"]
    if lang == "zh":
        from .schema import Lab
        from .verdict import compute_verdict
        text = compute_verdict(Lab.model_validate(doc["lab"]), doc["results"], lang="zh")["text"]
    click.echo(f"verdict: {text}")
    click.echo(f"reports: {os.path.join(out, 'report.html')}, {os.path.join(out, 'report.md')}, "
               f"{os.path.join(out, 'results.json')}, {os.path.join(out, 'results.csv')}")
    bad = [r for r in doc["results"] if r["status"] == "failed"]
    if bad:
        click.echo(f"{len(bad)} run(s) failed: see the report", err=True)
        sys.exit(1)


@lab.command("report")
@click.argument("out_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--lang", type=click.Choice(["en", "zh"]), default="en", show_default=True,
              help="The language of the reports (zh: Chinese, with a CJK font for the plots).")
def report(out_dir, lang) -> None:
    """Rebuild a run's reports (CSV, plots, markdown, HTML) from its results.json."""
    from .report import write_reports
    p = os.path.join(out_dir, "results.json")
    try:
        with open(p, encoding="utf-8") as fh:
            doc = json.load(fh)
        paths = write_reports(doc, out_dir, lang=lang)
    except (OSError, ValueError, KeyError) as exc:
        raise click.ClickException(f"{p}: not a lab results file ({exc})")
    click.echo(f"verdict: {paths['verdict']['text']}")
    click.echo("wrote " + ", ".join(os.path.join(out_dir, x) for x in [paths["csv"], paths["md"], paths["html"],
                                                                        *paths["plots"]]))
