"""A robust run is judged by what it was asked (issue 56): ``robust=dro`` asks every constraint
to hold at the worst case over the TV ball of radius γ around the noisy groups, and
``robust=soft_assignments`` at the worst case over the soft assignments 𝒲 (paper 004, (3) and
(7)); the verdict of such a run reads those robust values, with the noisy groups' ``g`` and,
where the data holds them, the true groups' violations beside each, labelled.

A constraint the robust evaluation does not cover (non-affine, an equality) keeps its verdict on
the noisy groups, and says so.

Example:
    >>> block = {"method": "dro", "gamma": {"a": 0.1, "b": 0.1}, "splits": {
    ...     "train": {"robust_values": {"eo": 0.03}, "true_violations": {"eo": 0.0}},
    ...     "test": {"robust_values": {"eo": 0.02}, "true_violations": {"eo": 0.01}}}}
    >>> noisy = {"eo": {"values": {"train": -0.01, "test": 0.0}, "verdict": "met",
    ...                 "status": "met"}}
    >>> v = robust_verdict(block, noisy, steps=500)
    >>> v["constraints"]["eo"]["status"], v["constraints"]["eo"]["noisy"]["train"]
    ('not_met', -0.01)
    >>> v["constraints"]["eo"]["verdict"].split(" (")[0]
    'NOT met on train — likely infeasible or too few steps'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fairgames.train.results.verdict import SLACK, constraint_verdict

# the robust values each method plays, in its results.json block, and what they are
JUDGED = {
    "dro": ("robust_values", "the worst case over the TV ball of radius γ around the noisy "
                             "groups (robust=dro)"),
    "soft_assignments": ("soft_values", "the worst case over the soft group assignments 𝒲 "
                                        "(robust=soft_assignments)"),
}


def robust_verdict(block: Mapping[str, Any], noisy: Mapping[str, Mapping[str, Any]], *,
                   steps: int) -> dict[str, Any] | None:
    """``results.json``'s verdict of a robust run from its ``robust`` block and the verdict on
    the noisy groups (``noisy``: ``verdict["constraints"]``); ``None`` for a run that is not
    robust (``robust=none`` with true groups: the noisy-group verdict stands)."""
    if block.get("method") not in JUDGED:
        return None
    key, what = JUDGED[block["method"]]
    splits = block["splits"]
    out: dict[str, Any] = {}
    for name, entry in noisy.items():
        values = {s: (e.get(key) or {}).get(name) for s, e in splits.items()}
        if values.get("train") is None:          # not covered: judged on the noisy groups
            out[name] = {**entry, "verdict": entry["verdict"] + " (on the noisy groups: the "
                         "robust evaluation does not cover this constraint)"}
        else:
            advice = (_advice(block, values["train"], steps)
                      if values["train"] > SLACK else "")
            out[name] = constraint_verdict("<=", values, {}, advice)
        out[name]["noisy"] = dict(entry["values"])
        true = {s: e["true_violations"].get(name) for s, e in splits.items()
                if "true_violations" in e}
        if true:
            out[name]["true_violation"] = true
    return {"judged": f"the robust constraints: {what}", "constraints": out}


def _advice(block: Mapping[str, Any], violation: float, steps: int) -> str:
    """What to try when the robust constraint is missed on train by ``violation``."""
    gamma = ", ".join(f"{v:.3f}" for v in block.get("gamma", {}).values())
    smaller = (f"a smaller robust.gamma (now {gamma})" if block["method"] == "dro"
               else "less noise in the groups (the soft assignments' 𝒲 follows P(G | Ĝ))")
    return (f"missed by {violation:.4f} at the worst case: try {smaller}, "
            f"trainer.steps={2 * steps}, or robust.select=tv / soft / played (which iterate "
            "is recommended)")
