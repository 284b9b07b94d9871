"""The `list` output the lab, exercise and demo commands share: a name and a title per line (the
Chinese title with --lang zh, the English one where there is none), or the rows as JSON."""
from __future__ import annotations

import json

import click


def echo_listing(rows: list[dict], as_json: bool, lang: str = "en") -> None:
    """rows: dicts with "name" and "title" (optionally "title_zh"); a row with "error" instead of a
    title shows the error."""
    if as_json:
        click.echo(json.dumps(rows, indent=1, ensure_ascii=False))
        return
    w = max((len(r["name"]) for r in rows), default=4)
    for r in rows:
        title = (r.get("title_zh") or r.get("title")) if lang == "zh" else r.get("title")
        click.echo(f"{r['name'].ljust(w)}  {title or r.get('error')}")
