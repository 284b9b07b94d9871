"""`rmq exercise list | show | start | check`: the exercises as commands (plugged in by labs.plugin)."""
from __future__ import annotations

import json
import sys

import click

from ..listing import echo_listing
from . import ExerciseError, check, describe, load_exercise, names, start, task_text


def _fail(exc: Exception) -> None:
    click.echo(f"Error: {exc}", err=True)
    sys.exit(1)


@click.group("exercise")
def exercise() -> None:
    """Exercises with hidden, auto-checked cases (some against a live broker)."""


@exercise.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.option("--lang", type=click.Choice(["en", "zh"]), default="en", show_default=True)
def list_cmd(as_json, lang) -> None:
    """The exercises that ship with the project."""
    rows = []
    for n in names():
        ex = load_exercise(n)
        rows.append({"name": n, "title": ex.title, "title_zh": ex.title_zh, "topic": ex.topic, "live": ex.live,
                     "file": ex.file, "entry": ex.entry})
    echo_listing(rows, as_json, lang)


@exercise.command("show")
@click.argument("name")
@click.option("--lang", type=click.Choice(["en", "zh"]), default="en", show_default=True)
def show(name, lang) -> None:
    """Print the task."""
    try:
        load_exercise(name)
        click.echo(task_text(name, lang))
    except ExerciseError as exc:
        _fail(exc)


@exercise.command("start")
@click.argument("name")
@click.argument("directory")
@click.option("--force", is_flag=True, help="Overwrite files already there.")
def start_cmd(name, directory, force) -> None:
    """Copy the starter code and the task into DIRECTORY."""
    try:
        ex = load_exercise(name)
        files = start(name, directory, force)
    except ExerciseError as exc:
        _fail(exc)
    for f in files:
        click.echo(f"wrote {f}")
    click.echo(f"Fill in {ex.entry} in {ex.file}, then: rmq exercise check {name} {directory}")


@exercise.command("check")
@click.argument("name")
@click.argument("directory", default=".")
@click.option("--json", "as_json", is_flag=True)
def check_cmd(name, directory, as_json) -> None:
    """Check your solution in DIRECTORY (default: here) against the hidden cases."""
    try:
        res = check(name, directory)
    except ExerciseError as exc:
        _fail(exc)
    click.echo(json.dumps(res.as_dict(), indent=1, ensure_ascii=False) if as_json else describe(res))
    sys.exit(0 if res.passed else 1)
