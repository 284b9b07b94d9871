"""The rule of a lab's `verdict:` applied to the measured numbers. The verdict is a sentence built
from those numbers and a boolean `holds`; nothing in it is written in advance."""
from __future__ import annotations

from .schema import Lab


def _value(r: dict, metric: str) -> float | None:
    if r.get("status") != "ok":
        return None
    v = r.get(metric, r.get("mechanism", {}).get(metric))
    if isinstance(v, list):
        v = sum(v) / len(v) if v else None
    return float(v) if v is not None else None


def compute_verdict(lab: Lab, results: list[dict]) -> dict:
    v = lab.verdict
    by_system: dict[str, list[tuple]] = {}
    for r in results:
        by_system.setdefault(r["system"], []).append((r["sweep_value"], _value(r, v.metric)))
    if v.against:
        by_system = {s: pts for s, pts in by_system.items() if s == v.expect_best or s in v.against}
    measured = {s: pts for s, pts in by_system.items() if pts and all(x is not None for _, x in pts)}
    if v.expect_best not in measured or len(measured) < 2:
        missing = sorted(set(by_system) - set(measured))
        return {"holds": None, "text": f"no verdict: {', '.join(missing) or 'a second system'} has no complete "
                                       f"measurement of {v.metric}", "numbers": {}}
    numbers: dict = {}
    if v.kind == "falloff":
        for s, pts in measured.items():
            first, last = pts[0][1], pts[-1][1]
            numbers[s] = {"first": first, "last": last, "kept": round(last / first, 3) if first else 0.0}
        best = max(numbers, key=lambda s: numbers[s]["kept"])
        key = results[0]["sweep_key"]
        a, b = measured[v.expect_best][0][0], measured[v.expect_best][-1][0]
        parts = [f"{s} keeps {n['kept']:.2f} of its {v.metric} ({n['first']:,.0f} -> {n['last']:,.0f})"
                 for s, n in numbers.items()]
        text = f"From {key}={a} to {key}={b}: " + "; ".join(parts) + f". {best} holds up best"
        holds = best == v.expect_best
    else:
        wins = 0
        rows = []
        for i, (point, mine) in enumerate(measured[v.expect_best]):
            others = {s: pts[i][1] for s, pts in measured.items() if s != v.expect_best and i < len(pts)}
            better = all((mine > o) if v.kind == "higher" else (mine < o) for o in others.values())
            wins += better
            rows.append({"point": point, v.expect_best: mine, **others})
            numbers[str(point)] = {v.expect_best: mine, **others}
        n = len(measured[v.expect_best])
        word = "highest" if v.kind == "higher" else "lowest"
        text = (f"{v.expect_best} has the {word} {v.metric} at {wins} of {n} point(s): " +
                "; ".join(", ".join(f"{k} {val:,.1f}" for k, val in r.items() if k != "point") +
                          (f" at {r['point']}" if r["point"] is not None else "") for r in rows))
        holds = wins == n
    return {"holds": holds, "text": text + (" — the claim holds." if holds else " — the claim does not hold here."),
            "numbers": numbers}
