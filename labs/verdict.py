"""The rule of a lab's `verdict:` applied to the measured numbers: holds, does not hold, or
inconclusive. Every point is measured several times; a system's figure is the median of its repeats
and its spread their range (min-max). A comparison is decided only when the two ranges do not overlap
and the medians differ by at least the lab's `min_effect` (a fraction of the larger median); anything
else is inconclusive. A claim about a timed figure (a rate, a latency, a duration) that would hold or
not hold on runs measured while the machine was starved (labs.starvation) is unreliable instead; the
sentence names those runs whatever the figure. The verdict is a sentence built from those numbers;
nothing in it is written in advance. A workload without a claim (verdict: null) gets no verdict."""
from __future__ import annotations

import statistics

from .schema import Lab
from .starvation import describe, starved, timed

HOLDS, NOT_HOLDS, INCONCLUSIVE, UNRELIABLE = "holds", "does not hold", "inconclusive", "unreliable"

_T = {
    "en": {
        "no_claim": "no verdict: {lab} is a workload, not a claim; the results are measurements only.",
        "missing": "no verdict: {who} has no complete measurement of {metric}",
        "a_second": "a second system",
        "one_repeat": "one measurement per point shows no spread",
        "overlap": "the ranges overlap",
        "small": "{eff:.0%} apart, below the lab's minimum effect of {min:.0%}",
        "apart": "{eff:.0%} apart",
        "med": "median of {n} repeat(s) [min-max]",
        "keeps": "{s} keeps {k} of its {metric} (medians {first} -> {last})",
        "falloff": "From {key}={a} to {key}={b} ({med}): {parts}. {best} keeps the most",
        "at": " at {key}={p}",
        "best": "{s} has the {word} {metric}",
        "higher": "highest", "lower": "lowest",
        "vs": "{a} vs {b}: {why}, {outcome}",
        HOLDS: "— the claim holds.", NOT_HOLDS: "— the claim does not hold here.",
        INCONCLUSIVE: "— inconclusive: the difference is inside the measured spread or below the minimum effect.",
        UNRELIABLE: "— unreliable: the comparison rests on runs measured while the machine was starved; run it "
                    "again on a quieter machine.",
        "o_" + HOLDS: "holds", "o_" + NOT_HOLDS: "does not hold", "o_" + INCONCLUSIVE: "inconclusive",
        "starved": " ({k} of the {n} runs compared were measured while the machine was starved: {which})",
        "starved_untimed": " ({k} of the {n} runs compared were measured while the machine was starved: {which}; "
                           "{metric} does not depend on timing)",
        "run_id": "{s}{at} repeat {i}: {how}",
        "colon": ": ", "lp": " (", "rp": ")", "semi": "; ",
    },
    "zh": {
        "no_claim": "没有结论：{lab} 是一个负载，不是一个论断；结果只是测量值。",
        "missing": "没有结论：{who} 没有完整的 {metric} 测量值",
        "a_second": "另一个系统",
        "one_repeat": "每个点只测了一次，看不出波动范围",
        "overlap": "两者的范围相互重叠",
        "small": "相差 {eff:.0%}，小于本实验设定的最小效应 {min:.0%}",
        "apart": "相差 {eff:.0%}",
        "med": "{n} 次重复的中位数 [最小值-最大值]",
        "keeps": "{s} 保持了其 {metric} 的 {k}（中位数 {first} -> {last}）",
        "falloff": "从 {key}={a} 到 {key}={b}（{med}）：{parts}。保持得最多的是 {best}",
        "at": "，{key}={p} 时",
        "best": "{s} 的 {metric} {word}",
        "higher": "最高", "lower": "最低",
        "vs": "{a} 对 {b}：{why}，{outcome}",
        HOLDS: "——论断成立。", NOT_HOLDS: "——论断在这里不成立。",
        INCONCLUSIVE: "——无法判定：差异落在测量的波动范围之内，或小于最小效应。",
        UNRELIABLE: "——不可靠：这个比较依赖于机器 CPU 不足（进程排队等待 CPU）时测得的运行；请在更空闲的机器上重新运行。",
        "o_" + HOLDS: "成立", "o_" + NOT_HOLDS: "不成立", "o_" + INCONCLUSIVE: "无法判定",
        "starved": "（参与比较的 {n} 次运行中有 {k} 次是在机器 CPU 不足时测得的：{which}）",
        "starved_untimed": "（参与比较的 {n} 次运行中有 {k} 次是在机器 CPU 不足时测得的：{which}；{metric} 与运行快慢无关）",
        "run_id": "{s}{at} 第 {i} 次重复：{how}",
        "colon": "：", "lp": "（", "rp": "）", "semi": "；",
    },
}


def _decimals(vals) -> int:
    vals = [float(v) for v in vals]
    if all(v.is_integer() for v in vals):
        return 0
    a = max(abs(v) for v in vals)
    return 0 if a >= 100 else 1 if a >= 10 else 2 if a >= 0.01 else 4


def fmt(v: float | int | None, unit: str = "") -> str:
    """A figure for a reader: thousands separators, decimals that mean something."""
    if v is None:
        return "-"
    s = f"{v:,.{_decimals([v])}f}"
    return f"{s} {unit}".rstrip() if unit else s


def fmt_range(med: float, lo: float, hi: float) -> str:
    """median [min-max] with the same decimals for the three; the median alone when they are equal."""
    d = _decimals([med, lo, hi])
    if lo == hi:
        return f"{med:,.{d}f}"
    return f"{med:,.{d}f} [{lo:,.{d}f}-{hi:,.{d}f}]"


def value(r: dict, metric: str) -> float | None:
    """A result's figure: a driver's or OMB's field, else a mechanism figure; a per-second series is averaged."""
    if r.get("status") != "ok":
        return None
    v = r.get(metric, r.get("mechanism", {}).get(metric))
    if isinstance(v, list):
        v = sum(v) / len(v) if v else None
    return float(v) if isinstance(v, (int, float)) else None


def by_point(results: list[dict], metric: str) -> dict[str, dict]:
    """{system: {sweep value: [each repeat's figure, None where it failed]}}, points in the order run."""
    out: dict[str, dict] = {}
    for r in results:
        out.setdefault(r["system"], {}).setdefault(r.get("sweep_value"), []).append(value(r, metric))
    return out


def spread(vals: list[float]) -> dict:
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals),
            "values": list(vals)}


def compare(mine: list[float], other: list[float], kind: str, min_effect: float) -> tuple[str, str, float]:
    """(outcome, reason key, relative effect) of `mine` against `other`, kind higher or lower is better."""
    ma, mb = statistics.median(mine), statistics.median(other)
    big = max(abs(ma), abs(mb))
    eff = abs(ma - mb) / big if big else 0.0
    if len(mine) < 2 or len(other) < 2:
        return INCONCLUSIVE, "one_repeat", eff
    if not (min(mine) > max(other) or min(other) > max(mine)):
        return INCONCLUSIVE, "overlap", eff
    if eff < min_effect:
        return INCONCLUSIVE, "small", eff
    better = ma > mb if kind == "higher" else ma < mb
    return (HOLDS if better else NOT_HOLDS), "apart", eff


def _overall(outcomes: list[str]) -> str:
    if NOT_HOLDS in outcomes:
        return NOT_HOLDS
    if outcomes and all(o == HOLDS for o in outcomes):
        return HOLDS
    return INCONCLUSIVE


def compute_verdict(lab: Lab, results: list[dict], lang: str = "en") -> dict:
    t = _T.get(lang, _T["en"])
    v = lab.verdict
    if v is None:
        return {"outcome": None, "holds": None, "text": t["no_claim"].format(lab=lab.name), "numbers": {}}
    pts = by_point(results, v.metric)
    if v.against:
        pts = {s: p for s, p in pts.items() if s == v.expect_best or s in v.against}
    complete = {s: {p: [x for x in xs if x is not None] for p, xs in p_.items()} for s, p_ in pts.items()}
    complete = {s: p_ for s, p_ in complete.items() if p_ and all(p_.values())}
    if v.expect_best not in complete or len(complete) < 2:
        missing = sorted(set(pts) - set(complete))
        return {"outcome": None, "holds": None, "numbers": {},
                "text": t["missing"].format(who=", ".join(missing) or t["a_second"], metric=v.metric)}
    key = next((r.get("sweep_key") for r in results), None)
    n = max(len(xs) for p_ in complete.values() for xs in p_.values())
    med = t["med"].format(n=n)

    def why(reason: str, eff: float) -> str:
        return t[reason].format(eff=eff, min=v.min_effect)

    numbers: dict = {}
    comparisons = []
    if v.kind == "falloff":
        kept: dict[str, list[float]] = {}
        for s, p_ in complete.items():
            points = list(p_)
            first, last = p_[points[0]], p_[points[-1]]
            # repeat i's share kept: its last point over its first (a repeat that failed at either is left out)
            raw = pts[s]
            ks = [b / a if a else 0.0 for a, b in zip(raw[points[0]], raw[points[-1]]) if a is not None and b is not None]
            if not ks:
                return {"outcome": None, "holds": None, "numbers": {},
                        "text": t["missing"].format(who=s, metric=v.metric)}
            kept[s] = ks
            numbers[s] = {"first": statistics.median(first), "last": statistics.median(last), **spread(ks),
                          "kept": round(statistics.median(ks), 3)}
        for s in complete:
            if s == v.expect_best:
                continue
            outcome, reason, eff = compare(kept[v.expect_best], kept[s], "higher", v.min_effect)
            comparisons.append({"against": s, "outcome": outcome, "effect": round(eff, 3), "reason": reason})
        points = list(complete[v.expect_best])
        parts = [t["keeps"].format(s=s, k=fmt_range(nm["median"], nm["min"], nm["max"]), metric=v.metric,
                                   first=fmt(nm["first"]), last=fmt(nm["last"]))
                 for s, nm in numbers.items()]
        best = max(numbers, key=lambda s: numbers[s]["median"])
        text = t["falloff"].format(key=key, a=points[0], b=points[-1], med=med, parts="; ".join(parts), best=best)
    else:
        rows = []
        for p in complete[v.expect_best]:
            numbers[str(p)] = {s: spread(p_[p]) for s, p_ in complete.items() if p in p_}
            mine = complete[v.expect_best][p]
            cmp_ = []
            for s, p_ in complete.items():
                if s == v.expect_best or p not in p_:
                    continue
                outcome, reason, eff = compare(mine, p_[p], v.kind, v.min_effect)
                comparisons.append({"point": p, "against": s, "outcome": outcome, "effect": round(eff, 3),
                                    "reason": reason})
                cmp_.append(t["vs"].format(a=v.expect_best, b=s, why=why(reason, eff), outcome=t["o_" + outcome]))
            figs = ", ".join(f"{s} {fmt_range(nm['median'], nm['min'], nm['max'])}" for s, nm in numbers[str(p)].items())
            rows.append((t["at"].format(key=key, p=p) if key else "") +
                        f"{t['colon']}{figs}{t['lp']}{t['semi'].join(cmp_)}{t['rp']}")
        text = t["best"].format(s=v.expect_best, word=t[v.kind], metric=v.metric) + f"{t['lp']}{med}{t['rp']}" + \
            t["semi"].join(r if i == 0 else r.lstrip() for i, r in enumerate(rows))
    outcome = _overall([c["outcome"] for c in comparisons])
    if v.kind == "falloff":
        text += t["lp"] + t["semi"].join(t["vs"].format(a=v.expect_best, b=c["against"], why=why(c["reason"], c["effect"]),
                                                        outcome=t["o_" + c["outcome"]]) for c in comparisons) + t["rp"]
    # runs measured while the machine was starved, among those compared
    compared = [r for r in results if r.get("status") == "ok" and r["system"] in complete]
    flagged = [(r, s) for r in compared for s in [starved(r)] if s]
    if flagged:
        which = t["semi"].join(t["run_id"].format(s=r["system"], at=f" {key}={r.get('sweep_value')}" if key else "",
                                                  i=r.get("repeat", 1), how=describe(s, lang)) for r, s in flagged)
        if timed(v.metric):
            text += t["starved"].format(k=len(flagged), n=len(compared), which=which)
            if outcome in (HOLDS, NOT_HOLDS):
                outcome = UNRELIABLE
        else:
            text += t["starved_untimed"].format(k=len(flagged), n=len(compared), which=which, metric=v.metric)
    return {"outcome": outcome, "holds": {HOLDS: True, NOT_HOLDS: False}.get(outcome), "min_effect": v.min_effect,
            "repeats": n, "text": f"{text} {t[outcome]}", "numbers": numbers, "comparisons": comparisons,
            "starved": [{"system": r["system"], "point": r.get("sweep_value"), "repeat": r.get("repeat", 1), **s}
                        for r, s in flagged]}
