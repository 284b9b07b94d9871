"""A lab run's outputs: results.csv, a PNG plot per metric (matplotlib), report.md and one
self-contained report.html (plots inlined) with the question, the setup, the tables, the verdict
with its numbers and the mechanism figures."""
from __future__ import annotations

import base64
import csv
import html
import io
import os

MECHANISM_COLUMNS = ("files_written", "payload_bytes_per_file_written", "write_syscalls", "bytes_written_to_disk",
                     "dirty_bytes_peak", "open_fds", "peak_rss_bytes")
RATE_COLUMNS = ("publishRateAvg", "consumeRateAvg", "backlogDrainRate", "aggregatedPublishLatency50pct", "aggregatedPublishLatency99pct",
                "aggregatedEndToEndLatency50pct", "aggregatedEndToEndLatency99pct")


def _columns(doc: dict) -> tuple:
    """The lab's own metrics first, then OMB's rates when the lab ran OMB's workload."""
    own = tuple(m for m in doc["lab"].get("metrics", []) if m not in MECHANISM_COLUMNS)
    rates = RATE_COLUMNS if doc["lab"].get("driver", "omb") == "omb" else ()
    return tuple(dict.fromkeys(own + rates))


def _rows(doc: dict) -> list[dict]:
    rows = []
    for r in doc["results"]:
        row = {"system": r["system"], "sweep": r.get("sweep_key") or "", "value": r.get("sweep_value"),
               "status": r["status"]}
        for c in _columns(doc):
            row[c] = round(r[c], 2) if isinstance(r.get(c), (int, float)) else ""
        for c in MECHANISM_COLUMNS:
            row[c] = r.get("mechanism", {}).get(c, "")
        row["reason"] = r.get("reason", "")
        rows.append(row)
    return rows


def _plot(doc: dict, metric: str) -> bytes | None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    series: dict[str, list] = {}
    for r in doc["results"]:
        if r["status"] == "ok" and isinstance(r.get(metric, r.get("mechanism", {}).get(metric)), (int, float)):
            series.setdefault(r["system"], []).append((r["sweep_value"], r.get(metric, r.get("mechanism", {}).get(metric))))
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    key = doc["results"][0].get("sweep_key")
    for name, pts in series.items():
        xs = [str(x) for x, _ in pts]
        ax.plot(xs, [y for _, y in pts], marker="o", label=name)
    ax.set_xlabel(key or "run")
    ax.set_ylabel(metric)
    ax.set_title(f"{doc['lab']['name']}: {metric}")
    ax.grid(alpha=0.3)
    ax.legend()
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def write_reports(doc: dict, out_dir: str) -> dict:
    rows = _rows(doc)
    paths = {}
    with open(os.path.join(out_dir, "results.csv"), "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["system"])
        w.writeheader()
        w.writerows(rows)
    paths["csv"] = "results.csv"
    plots = {}
    metric = doc["lab"]["verdict"]["metric"]
    for m in dict.fromkeys([metric, "files_written"]):
        png = _plot(doc, m)
        if png:
            name = f"plot-{m}.png"
            with open(os.path.join(out_dir, name), "wb") as fh:
                fh.write(png)
            plots[m] = (name, png)
    lab = doc["lab"]
    v = doc["verdict"]
    mach = doc["machine"]
    setup = (f"{mach['cpus']} CPUs ({mach['cpu'] or 'unknown model'}), {mach['memory_bytes'] / 2**30:.0f} GiB, "
             f"Python {mach['python']}, Linux {mach['kernel']}; {'--quick' if doc['quick'] else 'full'} run "
             f"finished {doc['finished']}")
    wl = lab["workload"]
    wl_line = ", ".join(f"{k}={wl[k]}" for k in ("topics", "partitionsPerTopic", "messageSize", "producerRate",
                                                 "subscriptionsPerTopic", "testDurationMinutes"))
    cols = ["system", "value", "status", *_columns(doc), *MECHANISM_COLUMNS]
    md = [f"# {lab['title']}", "", f"**Question.** {lab['question']}", "",
          f"**Source.** seed {lab['source']['seed']}, {lab['source']['section']}", "",
          f"**Claim.** {lab['claim']}", "", f"**Setup.** {setup}. Workload: {wl_line}; sweep: "
          f"{', '.join(f'{k} = {v_}' for k, v_ in lab['sweep'].items()) or 'none'}.", "",
          f"**Verdict.** {v['text']}", "", f"**Mechanism.** {lab['verdict']['explain']}", "",
          "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        md.append("| " + " | ".join(f"{r[c]:,.0f}" if isinstance(r[c], (int, float)) and abs(r[c]) >= 100 else str(r[c])
                                    for c in cols) + " |")
    failed = [r for r in doc["results"] if r["status"] != "ok"]
    if failed:
        md += ["", "## Systems that did not run", ""]
        for r in failed:
            md.append(f"- {r['system']} ({r['status']}): {r.get('reason', '')}")
            if r.get("log_tail"):
                md += ["", "```text", r["log_tail"][-2000:], "```"]
    for m, (name, _) in plots.items():
        md += ["", f"![{m}]({name})"]
    with open(os.path.join(out_dir, "report.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(md) + "\n")
    paths["md"] = "report.md"
    e = html.escape
    table = ["<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in cols) + "</tr>"]
    for r in rows:
        table.append("<tr>" + "".join(f"<td>{e(str(r[c]))}</td>" for c in cols) + "</tr>")
    table.append("</table>")
    imgs = "".join(f'<figure><img alt="{e(m)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
                   f"<figcaption>{e(m)}</figcaption></figure>" for m, (_, png) in plots.items())
    fails = "".join(f"<h3>{e(r['system'])}: {e(r['status'])}</h3><p>{e(r.get('reason', ''))}</p>"
                    f"<pre>{e(r.get('log_tail', '')[-2000:])}</pre>" for r in failed)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{e(lab['title'])}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.4}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}th{{background:#eee}}.v{{padding:.6em;background:#f4f8ff;border-left:4px solid #36c}}</style>
</head><body><h1>{e(lab['title'])}</h1><p><b>Question.</b> {e(lab['question'])}</p>
<p><b>Source.</b> seed {e(lab['source']['seed'])}, {e(lab['source']['section'])}</p><p><b>Claim.</b> {e(lab['claim'])}</p>
<p><b>Setup.</b> {e(setup)}. Workload: {e(wl_line)}.</p><p class="v"><b>Verdict.</b> {e(v['text'])}</p>
<p><b>Mechanism.</b> {e(lab['verdict']['explain'])}</p>{''.join(table)}{imgs}{fails}</body></html>"""
    with open(os.path.join(out_dir, "report.html"), "w", encoding="utf-8") as fh:
        fh.write(page)
    paths["html"] = "report.html"
    paths["plots"] = [n for n, _ in plots.values()]
    return paths
