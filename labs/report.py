"""A lab run's outputs: results.csv (every repeat), a PNG plot of the verdict's figure and of each
mechanism figure the lab names (matplotlib: medians with their min-max range, y from zero, bars for a
single point), report.md and one self-contained report.html (plots inlined) with the question, the
setup as it ran, the verdict with its numbers, what this means, the mechanism and a table of medians
and ranges with units. `lang="zh"` renders all of it in Chinese, with a CJK font for the plots."""
from __future__ import annotations

import base64
import csv
import html
import io
import os
import re
import statistics
import sys

from .starvation import describe, starved
from .units import unit
from .verdict import by_point, compute_verdict, fmt, fmt_range

MECHANISM_FIGURES = ("fsyncs", "messages_per_fsync", "group_commits", "files_written", "files_created",
                     "payload_bytes_per_file_written", "write_syscalls", "bytes_written_to_disk", "dirty_bytes_peak",
                     "writeback_bytes_end", "open_fds", "peak_rss_bytes",
                     # with lab conditions (labs/conditions.py): the throttled disk's and the memory cgroup's
                     "disk_write_iops", "disk_write_MBps", "disk_kb_per_write", "disk_write_merge_share",
                     "cgroup_page_cache_bytes", "cgroup_limit_hits", "cgroup_dirty_bytes_peak",
                     "cgroup_writeback_bytes_peak",
                     # OMB workloads: CPU per acknowledged message of the broker and of each kind of client process
                     "broker_cpu_us_per_msg", "runner_cpu_us_per_msg", "producers_cpu_us_per_msg",
                     "consumers_cpu_us_per_msg")

_T = {
    "en": {"question": "Question", "source": "Source", "seed": "seed", "claim": "Claim", "setup": "Setup",
           "verdict": "Verdict", "meaning": "What this means", "mechanism": "Mechanism", "results": "Results",
           "system": "system", "repeats": "repeats", "not_run": "Systems that did not run", "run": "run",
           "full": "full run", "quick": "--quick run", "finished": "finished", "workload": "Workload",
           "phases": "warm-up {w} s, measured phase {m} s (as set)", "times": "the same in {n} runs",
           "sweep": "sweep", "none": "none", "cpus": "CPUs", "unknown": "unknown model",
           "each": "each point measured {n} time(s), the systems interleaved",
           "measured": "measured phase {lo}-{hi} s per run", "took": "each run took {lo}-{hi} s",
           "table_note": "Each cell: the median of the repeats, and [min-max] when they differ.",
           "plot_note": "median; the bar or whisker spans min-max of the repeats; y from zero",
           "m_holds": "Every comparison the claim makes came out the way the seed says, by more than the "
                         "measured spread and by at least {min:.0%}: {detail}.",
           "m_does not hold": "The measurements depart from the seed's claim: {detail}. The mechanism figures in the "
                              "table are where to look for why: this is one machine (a shared 2-core VM runs "
                              "client and broker on the same cores), not the seed's servers.",
           "m_inconclusive": "This run cannot decide the claim: {detail}. A difference inside the spread of "
                             "repeated measurements is noise until more repeats or a quieter machine separate it "
                             "(rmq lab run NAME without --quick, or --repeats N).",
           "m_none": "The workload's figures for each system, as measured; with no claim there is nothing to "
                     "decide, and a gap between two systems means something only where their ranges in brackets "
                     "do not overlap.", "d_apart": "{a} vs {b}{at}: {eff:.0%} apart ({o})",
           "d_overlap": "{a} vs {b}{at}: ranges overlap", "d_small": "{a} vs {b}{at}: {eff:.0%} apart, below {min:.0%}",
           "d_one_repeat": "{a} vs {b}{at}: one measurement, no spread", "at": " at {key}={p}",
           "m_unreliable": "The comparisons came out as follows: {detail}; but they rest on runs measured while the "
                           "machine was starved (listed in the verdict and counted in the table's starved column): "
                           "a broker or client process spent at least as long waiting for a CPU as running, so its "
                           "figures say as much about the machine's other work as about the system. Run the lab "
                           "again when the machine is quieter.",
           "starved_col": "starved runs",
           "conditions": "Conditions the lab set", "c_set": "set", "c_skipped": "skipped",
           "no_font": "no CJK font found for the plots (install the project's labs extra: pip install -e '.[labs]', "
                      "or Debian fonts-noto-cjk); the plots keep English labels"},
    "zh": {"question": "问题", "source": "出处", "seed": "种子文件", "claim": "论断", "setup": "环境",
           "verdict": "结论", "meaning": "这意味着什么", "mechanism": "机制", "results": "结果",
           "system": "系统", "repeats": "重复次数", "not_run": "未能运行的系统", "run": "运行",
           "full": "完整运行", "quick": "--quick 运行", "finished": "结束于", "workload": "负载",
           "phases": "预热 {w} 秒，测量阶段 {m} 秒（设定值）", "times": "{n} 次运行结果相同",
           "sweep": "扫描", "none": "无", "cpus": "个 CPU", "unknown": "未知型号",
           "each": "每个点测量 {n} 次，各系统交替运行",
           "measured": "每次运行的测量阶段为 {lo}-{hi} 秒", "took": "每次运行耗时 {lo}-{hi} 秒",
           "table_note": "每个单元格：各次重复的中位数；各次结果不同时附 [最小值-最大值]。",
           "plot_note": "中位数；柱或须线表示各次重复的最小值到最大值；y 轴从零开始",
           "m_holds": "论断涉及的每一项比较都与种子文件所说的方向一致，差距超过测量的波动范围，且至少为 {min:.0%}：{detail}。",
           "m_does not hold": "测量结果与种子文件的论断不符：{detail}。原因可以从表中的机制数据里找：这是一台机器"
                              "（共享的 2 核虚拟机上客户端与 Broker 共用同样的核），不是种子文件里的服务器。",
           "m_inconclusive": "这次运行无法判定该论断：{detail}。落在重复测量波动范围之内的差异只是噪声，"
                             "需要更多的重复或更安静的机器才能分辨（不加 --quick 运行 rmq lab run NAME，或使用 --repeats N）。",
           "m_none": "各系统在该负载下的测量值；没有论断也就没有需要判定的内容，两个系统之间的差距只有在方括号中的"
                     "范围互不重叠时才有意义。", "d_apart": "{a} 对 {b}{at}：相差 {eff:.0%}（{o}）",
           "d_overlap": "{a} 对 {b}{at}：范围重叠", "d_small": "{a} 对 {b}{at}：相差 {eff:.0%}，小于 {min:.0%}",
           "d_one_repeat": "{a} 对 {b}{at}：只测了一次，没有波动范围", "at": "（{key}={p}）",
           "m_unreliable": "各项比较的结果如下：{detail}；但它们依赖于机器 CPU 不足时测得的运行（见结论中列出的运行和表中的"
                           "“CPU 不足的运行”一列）：Broker 或客户端进程等待 CPU 的时间不少于它运行的时间，所以这些数据反映的"
                           "既是被测系统，也是机器上的其他负载。请在机器更空闲时重新运行本实验。",
           "starved_col": "CPU 不足的运行",
           "conditions": "实验设定的条件", "c_set": "已设定", "c_skipped": "已跳过",
           "no_font": "没有找到用于绘图的中文字体（安装本项目的 labs 附加依赖：pip install -e '.[labs]'，"
                      "或 Debian 的 fonts-noto-cjk）；图中保留英文标签"},
}
_OUTCOME_ZH = {"holds": "成立", "does not hold": "不成立", "inconclusive": "无法判定", "unreliable": "不可靠"}


def _fig(v: float | None, u: str) -> str:
    """A figure with its unit; byte counts in KB/MB/GB."""
    if v is None:
        return "-"
    if u == "bytes":
        for step, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if abs(v) >= step:
                return f"{v / step:,.1f} {name}"
        return f"{v:,.0f} B"
    return fmt(v, u)


def _cell(vals: list[float], u: str) -> str:
    if not vals:
        return "-"
    med = statistics.median(vals)
    lo, hi = min(vals), max(vals)
    if u == "bytes":
        return _fig(med, u) if lo == hi else f"{_fig(med, u)} [{_fig(lo, u)}-{_fig(hi, u)}]"
    return fmt_range(med, lo, hi)


def columns(doc: dict) -> tuple[list[str], list[str]]:
    """(the lab's own figures, the mechanism figures it names) that have a value in some result."""
    lab = doc["lab"]
    verdict_metric = [lab["verdict"]["metric"]] if lab.get("verdict") else []
    own = [m for m in dict.fromkeys(verdict_metric + list(lab.get("metrics", [])))
           if m not in MECHANISM_FIGURES or m in verdict_metric]
    mech = [m for m in dict.fromkeys(lab.get("mechanism", []) +
                                     [m for m in lab.get("metrics", []) if m in MECHANISM_FIGURES]) if m not in own]
    has = {m for r in doc["results"] for m in own + mech
           if isinstance(r.get(m, r.get("mechanism", {}).get(m)), (int, float, list))}
    return [m for m in own if m in has], [m for m in mech if m in has]


def _cjk_font() -> str | None:
    """A font file with Chinese glyphs: the labs extra's Noto Sans CJK, else one the system has."""
    try:
        import cvttf_NotoSansCJK_Regular as noto   # PyPI cvttf-NotoSansCJK-Regular: Noto Sans CJK (OFL)
        return noto.get_TTF_path()
    except (ImportError, FileNotFoundError):
        pass
    from matplotlib import font_manager
    for f in font_manager.findSystemFonts():
        if any(w in os.path.basename(f) for w in ("NotoSansCJK", "NotoSerifCJK", "wqy", "SourceHanSans", "DroidSansFallback")):
            return f
    return None


#: per font file: (the characters it holds, a cut of it) once a process has embedded that font twice
_CUTS: dict[str, tuple[frozenset, bytes]] = {}
_EMBEDDED: dict[str, int] = {}


def _shipped_chars() -> set[str]:
    """The CJK characters of the shipped labs' texts and of the Chinese report and verdict strings."""
    from pathlib import Path
    from . import starvation, verdict
    text = "".join(p.read_text(encoding="utf-8") for p in (Path(__file__).parent / "library").glob("*.yaml"))
    text += repr(_T["zh"]) + repr(_OUTCOME_ZH) + repr(verdict._T["zh"]) + repr(starvation.describe.__doc__)
    text += "的可运行时间在等待整机繁忙，"
    return {c for c in text if ord(c) > 0x2e7f}


def _cut(src, chars: str, flavor: str | None) -> bytes:
    from fontTools import subset
    from fontTools.ttLib import TTFont
    opts = subset.Options()
    opts.flavor = flavor
    opts.notdef_outline = True
    f = TTFont(src, lazy=True)
    sub = subset.Subsetter(opts)
    sub.populate(text=chars)
    sub.subset(f)
    buf = io.BytesIO()
    f.flavor = flavor
    f.save(buf)
    return buf.getvalue()


def _embedded_font(page: str, font: str | None) -> str:
    """An @font-face rule carrying the CJK characters the page uses, cut from `font` (fontTools, which
    matplotlib already needs) and inlined as WOFF, so the report reads the same on a machine without
    Chinese fonts; "" when the page has none or no font is there. Cutting from a full CJK font takes
    a second or more; a process that writes a second report (the test suite, `rmq lab report` after a
    run) first cuts the characters of every shipped lab and report string once, and later pages are
    cut from that small font."""
    chars = "".join(sorted({c for c in page if ord(c) > 0x2e7f}))
    if not chars or font is None:
        return ""
    try:
        _EMBEDDED[font] = _EMBEDDED.get(font, 0) + 1
        if font not in _CUTS and _EMBEDDED[font] >= 2:
            have = frozenset(_shipped_chars() | set(chars))
            _CUTS[font] = (have, _cut(font, "".join(sorted(have)), None))
        have, small = _CUTS.get(font, (frozenset(), b""))
        woff = _cut(io.BytesIO(small), chars, "woff") if set(chars) <= have else _cut(font, chars, "woff")
    except Exception as exc:  # a font fontTools cannot cut: the page falls back to the reader's fonts
        print(f"rmq lab: could not embed the CJK font ({type(exc).__name__}: {exc})", file=sys.stderr)
        return ""
    return ("@font-face{font-family:LabCJK;src:url(data:font/woff;base64," + base64.b64encode(woff).decode() +
            ") format('woff')}")


def _plot(doc: dict, metric: str, lang: str, font: str | None, title: str) -> bytes | None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import font_manager
    pts = {s: {p: [x for x in xs if x is not None] for p, xs in ps.items()}
           for s, ps in by_point(doc["results"], metric).items()}
    pts = {s: {p: xs for p, xs in ps.items() if xs} for s, ps in pts.items()}
    pts = {s: ps for s, ps in pts.items() if ps}
    if not pts:
        return None
    zh = lang == "zh" and font is not None
    prop = None
    if zh:
        font_manager.fontManager.addfont(font)
        prop = font_manager.FontProperties(fname=font)
    key = next((r.get("sweep_key") for r in doc["results"]), None)
    points = list(dict.fromkeys(p for ps in pts.values() for p in ps))
    u = unit(metric)
    scale, u_shown = 1.0, u
    if u == "bytes":
        top = max(max(xs) for ps in pts.values() for xs in ps.values())
        scale, u_shown = next(((s, n) for s, n in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")) if top >= s),
                              (1.0, "bytes"))
    fig, ax = plt.subplots(figsize=(7.2, 3.8), dpi=100)
    systems = list(pts)
    if len(points) == 1:                      # one point: bars, the whisker spans the repeats
        for i, s in enumerate(systems):
            xs = [x / scale for x in pts[s][points[0]]]
            med = statistics.median(xs)
            ax.bar(i, med, color=f"C{i}", yerr=[[med - min(xs)], [max(xs) - med]], capsize=6)
        ax.set_xticks(range(len(systems)), systems, fontproperties=prop)
        if key:
            ax.set_xlabel(f"{key} = {points[0]}")
    else:
        for i, s in enumerate(systems):
            idx = [j for j, p in enumerate(points) if p in pts[s]]
            meds = [statistics.median(pts[s][points[j]]) / scale for j in idx]
            lo = [m - min(pts[s][points[j]]) / scale for m, j in zip(meds, idx)]
            hi = [max(pts[s][points[j]]) / scale - m for m, j in zip(meds, idx)]
            ax.errorbar(idx, meds, yerr=[lo, hi], marker="o", capsize=4, label=s, color=f"C{i}")
        ax.set_xticks(range(len(points)), [str(p) for p in points])
        ax.set_xlabel(key or "")
        ax.legend(prop=prop)
    ax.set_ylim(bottom=0)
    ax.set_ylabel(f"{metric}" + (f" ({u_shown})" if u_shown else ""))
    ax.set_title(title, fontproperties=prop, fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _setup(doc: dict, t: dict) -> str:
    mach = doc["machine"]
    n = doc.get("repeats") or 1
    ok = [r for r in doc["results"] if r["status"] == "ok"]
    measured = [r["measuredSeconds"] for r in ok if isinstance(r.get("measuredSeconds"), (int, float))]
    took = [r["seconds"] for r in ok if isinstance(r.get("seconds"), (int, float))]
    phase = (t["measured"].format(lo=fmt(min(measured)), hi=fmt(max(measured))) if measured else
             t["took"].format(lo=fmt(min(took)), hi=fmt(max(took))) if took else "")
    return (f"{mach['cpus']} {t['cpus']} ({mach['cpu'] or t['unknown']}), {mach['memory_bytes'] / 2**30:.0f} GiB, "
            f"Python {mach['python']}, Linux {mach['kernel']}; {t['quick'] if doc['quick'] else t['full']}, "
            f"{t['each'].format(n=n)}" + (f"; {phase}" if phase else "") + f"; {t['finished']} {doc['finished']}")


def _meaning(doc: dict, v: dict, t: dict, lang: str) -> str:
    if v.get("outcome") is None:
        return t["m_none"]
    key = next((r.get("sweep_key") for r in doc["results"]), None)
    best = doc["lab"]["verdict"]["expect_best"]
    parts = []
    for c in v.get("comparisons", []):
        at = t["at"].format(key=key, p=c["point"]) if "point" in c and key else ""
        o = _OUTCOME_ZH.get(c["outcome"], c["outcome"]) if lang == "zh" else c["outcome"]
        parts.append(t["d_" + c["reason"]].format(a=best, b=c["against"], at=at, eff=c["effect"], o=o,
                                                  min=v.get("min_effect", 0.1)))
    sep = "；" if lang == "zh" else "; "
    return t["m_" + v["outcome"]].format(detail=sep.join(parts), min=v.get("min_effect", 0.1))


def write_reports(doc: dict, out_dir: str, lang: str = "en") -> dict:
    from .schema import Lab, unfold_cjk
    t = _T[lang]
    zh = lang == "zh"
    lab = doc["lab"]
    v = doc["verdict"]
    if zh:                                     # the verdict's sentence in Chinese, from the same numbers
        v = compute_verdict(Lab.model_validate(lab), doc["results"], lang="zh")
    own, mech = columns(doc)
    key = next((r.get("sweep_key") for r in doc["results"]), None)
    sweep_col = key or t["run"]
    paths: dict = {}
    # results.csv: every repeat, as measured, and whether the machine was starved while it ran
    raw_cols = ["system", sweep_col, "repeat", "status", *own, *mech, "starved", "reason"]
    with open(os.path.join(out_dir, "results.csv"), "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(raw_cols)
        for r in doc["results"]:
            row = [r["system"], r.get("sweep_value"), r.get("repeat", 1), r["status"]]
            for m in own + mech:
                x = r.get(m, r.get("mechanism", {}).get(m))
                if isinstance(x, list):
                    x = round(sum(x) / len(x), 3) if x else ""
                row.append(round(x, 3) if isinstance(x, float) else ("" if x is None else x))
            st = starved(r)
            w.writerow(row + [describe(st) if st else "", r.get("reason", "")])
    paths["csv"] = "results.csv"
    # the table: one row per (point, system), medians and ranges
    any_starved = any(starved(r) for r in doc["results"])
    header = [t["system"]] + ([sweep_col] if key else []) + [t["repeats"]] + \
        [m + (f" ({unit(m)})" if unit(m) and unit(m) != "bytes" else "") for m in own + mech] + \
        ([t["starved_col"]] if any_starved else [])
    groups: dict[tuple, list[dict]] = {}
    for r in doc["results"]:
        if r["status"] == "ok":
            groups.setdefault((r.get("sweep_value"), r["system"]), []).append(r)
    order = list(dict.fromkeys(r.get("sweep_value") for r in doc["results"]))
    table = []
    for p in order:
        for (pv, s), rs in groups.items():
            if pv != p:
                continue
            cells = [s] + ([str(p)] if key else []) + [str(len(rs))]
            for m in own + mech:
                vals = [x for x in (_value_of(r, m) for r in rs) if x is not None]
                cells.append(_cell(vals, unit(m)))
            if any_starved:
                cells.append(f"{sum(1 for r in rs if starved(r))}/{len(rs)}")
            table.append(cells)
    # plots: the verdict's figure, then the mechanism figures the lab names
    font = _cjk_font() if zh else None
    if zh and font is None:
        print(f"rmq lab: {t['no_font']}", file=sys.stderr)
    plots: dict = {}
    title_of = (lab.get("title_zh") or lab["title"]) if zh else lab["title"]
    first = [lab["verdict"]["metric"]] if lab.get("verdict") else own[:1]
    for m in dict.fromkeys(first + mech):
        png = _plot(doc, m, lang, font, m + (f" ({unit(m)})" if unit(m) and unit(m) != "bytes" else ""))
        if png:
            name = f"plot-{m}.png"
            with open(os.path.join(out_dir, name), "wb") as fh:
                fh.write(png)
            plots[m] = (name, png)
    question = unfold_cjk(lab.get("question_zh") or lab["question"]) if zh else lab["question"]
    claim = unfold_cjk(lab.get("claim_zh") or lab["claim"]) if zh else lab["claim"]
    explain = ""
    if lab.get("verdict"):
        explain = unfold_cjk(lab["verdict"].get("explain_zh") or lab["verdict"]["explain"]) if zh \
            else lab["verdict"]["explain"]
    wl = lab["workload"]
    omb = lab.get("driver", "omb") == "omb"
    wl_keys = ("topics", "partitionsPerTopic", "messageSize") + (
        ("producerRate", "producersPerTopic", "subscriptionsPerTopic") if omb else ())
    wl_line = ", ".join(f"{k}={wl[k]}" for k in wl_keys if k not in lab["sweep"])
    if omb:
        wl_line += ", " + t["phases"].format(w=fmt(wl["warmupDurationMinutes"] * 60), m=fmt(wl["testDurationMinutes"] * 60))
    else:
        wl_line += f"; {lab['driver']} driver: " + ", ".join(f"{k}={v_}" for k, v_ in lab.get("params", {}).items()
                                                             if k not in lab["sweep"])
    sweep = ", ".join(f"{k} = {v_}" for k, v_ in lab["sweep"].items()) or t["none"]
    setup = _setup(doc, t)
    meaning = _meaning(doc, v, t, lang)
    failed, seen = [], {}
    for r in doc["results"]:                 # a system that failed the same way in every repeat is listed once
        if r["status"] != "ok":
            k = (r["system"], r["status"], r.get("reason", ""))
            if k not in seen:
                seen[k] = dict(r, times=0)
                failed.append(seen[k])
            seen[k]["times"] += 1
    md = [f"# {title_of}", "", f"**{t['question']}.** {question.strip()}", "",
          f"**{t['source']}.** {t['seed']} {lab['source']['seed']}, {lab['source']['section']}", "",
          f"**{t['claim']}.** {claim.strip()}", "", f"**{t['setup']}.** {setup}. {t['workload']}: {wl_line}; "
          f"{t['sweep']}: {sweep}.", "", f"**{t['verdict']}.** {v['text']}", "", f"**{t['meaning']}.** {meaning}", ""]
    if explain:
        md += [f"**{t['mechanism']}.** {explain.strip()}", ""]
    cond_zh = {"producer processes": "生产者进程", "bounded page cache": "受限的页缓存", "throttled disk": "限速磁盘"}
    conds = [(cond_zh.get(c["condition"], c["condition"]) if zh else c["condition"], t["c_" + c["status"]],
              c.get("detail") or c.get("reason", ""))
             for c in doc.get("conditions") or []]
    if conds:
        md += [f"**{t['conditions']}.**", ""] + [f"- {n} ({st}): {d}" for n, st, d in conds] + [""]
    md += [t["table_note"], "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in table]
    if failed:
        md += ["", f"## {t['not_run']}", ""]
        for r in failed:
            md.append(f"- {r['system']} ({r['status']}): {r.get('reason', '')}" +
                      (f" ({t['times'].format(n=r['times'])})" if r["times"] > 1 else ""))
            if r.get("log_tail"):
                md += ["", "```text", r["log_tail"][-2000:], "```"]
    for m, (name, _) in plots.items():
        md += ["", f"![{m}]({name})"]
    with open(os.path.join(out_dir, "report.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(md) + "\n")
    paths["md"] = "report.md"
    e = html.escape
    def td(c: str) -> str:                   # the median on top, its range below it in grey
        med, sep, rng = c.partition(" [")
        return f"<td>{e(med)}" + (f'<br><span class="r">[{e(rng)}</span>' if sep else "") + "</td>"
    rows_html = "".join("<tr>" + "".join(td(c) for c in row) + "</tr>" for row in table)
    table_html = (f'<div class="scroll"><table><thead><tr>{"".join(f"<th>{_breakable(e(c))}</th>" for c in header)}'
                  f'</tr></thead>'
                  f"<tbody>{rows_html}</tbody></table></div>")
    imgs = "".join(f'<figure><img alt="{e(m)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
                   f"<figcaption>{e(m)} ({e(t['plot_note'])})</figcaption></figure>" for m, (_, png) in plots.items())
    fails = "".join(f"<h3>{e(r['system'])}: {e(r['status'])}</h3><p>{e(r.get('reason', ''))}"
                    f"{e(' (' + t['times'].format(n=r['times']) + ')') if r['times'] > 1 else ''}</p>"
                    f"<pre>{e(r.get('log_tail', '')[-2000:])}</pre>" for r in failed)
    fails = f"<h2>{e(t['not_run'])}</h2>{fails}" if failed else ""
    conds_html = (f"<p><b>{e(t['conditions'])}.</b></p><ul>" +
                  "".join(f"<li>{e(n)} ({e(st)}): {e(d)}</li>" for n, st, d in conds) + "</ul>") if conds else ""
    page = f"""<!doctype html><html lang="{'zh-CN' if zh else 'en'}"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>{e(title_of)}</title>
<style>FONTFACE body{{font-family:LabCJK,Arial,"DejaVu Sans",sans-serif;max-width:1180px;margin:2em auto;padding:0 1em;line-height:1.45}}
.scroll{{overflow-x:auto;max-width:100%}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right;vertical-align:top}}th{{background:#eee;max-width:11em}}
td:first-child,th:first-child{{text-align:left}}td{{white-space:nowrap}}.r{{color:#666;font-size:11px}}
.v{{padding:.6em;background:#f4f8ff;border-left:4px solid #36c}}.m{{padding:.6em;background:#f7f7f2;border-left:4px solid #996}}
img{{max-width:100%}}figure{{margin:1em 0}}figcaption{{font-size:12px;color:#555}}pre{{white-space:pre-wrap}}</style>
</head><body><h1>{e(title_of)}</h1><p><b>{e(t['question'])}.</b> {e(question)}</p>
<p><b>{e(t['source'])}.</b> {e(t['seed'])} {e(lab['source']['seed'])}, {e(lab['source']['section'])}</p>
<p><b>{e(t['claim'])}.</b> {e(claim)}</p>
<p><b>{e(t['setup'])}.</b> {e(setup)}. {e(t['workload'])}: {e(wl_line)}; {e(t['sweep'])}: {e(sweep)}.</p>
<p class="v"><b>{e(t['verdict'])}.</b> {e(v['text'])}</p><p class="m"><b>{e(t['meaning'])}.</b> {e(meaning)}</p>
{f"<p><b>{e(t['mechanism'])}.</b> {e(explain)}</p>" if explain else ""}{conds_html}<h2>{e(t['results'])}</h2>
<p>{e(t['table_note'])}</p>{table_html}{imgs}{fails}</body></html>"""
    page = page.replace("FONTFACE", _embedded_font(page, font if zh else _cjk_font()), 1)
    with open(os.path.join(out_dir, "report.html"), "w", encoding="utf-8") as fh:
        fh.write(page)
    paths["html"] = "report.html"
    paths["plots"] = [n for n, _ in plots.values()]
    paths["verdict"] = v
    return paths


def _breakable(name: str) -> str:
    """A long figure name in a table heading may wrap after an underscore or before a capital."""
    return re.sub(r"(_)(?=[a-z])|(?<=[a-z0-9])(?=[A-Z])", lambda m: (m.group(1) or "") + "<wbr>", name)


def _value_of(r: dict, m: str) -> float | None:
    x = r.get(m, r.get("mechanism", {}).get(m))
    if isinstance(x, list):
        x = sum(x) / len(x) if x else None
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None
