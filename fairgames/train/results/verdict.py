"""A run's verdict: per constraint, met or not, in plain words, with the evidence.

For the solution the run reports (:data:`VERDICT_SOLUTION`), each constraint ``g ≤ 0`` gets
exactly one status from its values ``g`` on train and test and its test interval (the 95 %
percentile bootstrap interval of :mod:`fairgames.train.results.intervals`):

* ``undefined`` — "undefined on <split>": ``g`` has no value on the train split, or it is met
  on train and has no value on the test split (a subset with no row there, or a ratio whose
  denominator is 0). (A run refuses, before its first step, a constraint whose subset has no
  row in the training split.) Undefined on validation only, the status is read from train and
  test as below and the sentence ends with "(undefined on validation)";
* ``not_met`` — "NOT met on train — likely infeasible or too few steps (<what to try>)":
  the train violation exceeds :data:`SLACK` (1e-6, float rounding); read before the test
  split, so a constraint undefined on test (a group with no test row) still reads "NOT met on
  train", its sentence ending with "(undefined on test)";
* ``met`` — the train violation is at most :data:`SLACK` and so is the test violation;
* ``not_significant`` — "met on train, not significant on test": met on train; on test the
  constraint is violated, but not significantly: the test interval is consistent with it
  (its lower end ≤ 0; for an equality ``g = 0``: it contains 0), so the miss is within
  sampling noise;
* ``missed_on_test`` — "met on train, NOT met on test (significant)": met on train, but the
  whole test interval lies above 0 (for an equality: excludes 0), a test violation beyond
  sampling noise. Without an interval (``trainer.bootstrap=0``, or fewer than half of the
  resamples define ``g``) any test violation above :data:`SLACK` reads as this one.

What to try, for a constraint not met on train: the infeasibility monitor's flag
(``training.likely_infeasible``) when it is raised, more steps, ``trainer.tune=validation``,
and the tolerance at which this model's train values would pass.

Example:
    >>> v = constraint_verdict("<=", {"train": -0.01, "validation": 0.0, "test": 0.004},
    ...                        {"train": None, "validation": None, "test": [-0.01, 0.02]}, "")
    >>> v["status"], v["verdict"]
    ('not_significant', 'met on train, not significant on test')
    >>> constraint_verdict("<=", {"train": 0.05, "test": 0.06}, {}, "try more steps")["verdict"]
    'NOT met on train — likely infeasible or too few steps (try more steps)'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from fairgames.problems.errors import ProblemError
from fairgames.problems.language import parse
from fairgames.problems.spec import TOLERANCE_RANGES
from fairgames.problems.syntax import free_names

VERDICT_SOLUTION = "recommended"   # the solution whose verdict a run reports
SLACK = 1e-6                      # train violations up to this are float rounding
SPLITS = ("train", "validation", "test")
MAX_LINES = 12                    # constraints the terminal lists one by one
STATUSES = ("met", "not_significant", "missed_on_test", "not_met", "undefined")


def constraint_verdict(sense: str, values: Mapping[str, float | None],
                       intervals: Mapping[str, Sequence[float] | None], advice: str
                       ) -> dict[str, Any]:
    """One constraint's verdict from its ``g`` per split, its intervals per split (``None``
    where there is none) and ``advice`` (what to try if it is not met on train): ``status``
    (one of :data:`STATUSES`), ``verdict`` (the sentence), ``train`` (``g``), ``test``
    (the interval), and every split's ``values`` and ``intervals``."""
    if sense not in ("<=", "=="):
        raise ValueError(f"sense must be '<=' or '==', got {sense!r}")
    undefined = [s for s in ("train", "test") if values.get(s) is None]
    # a train violation is read first: a group with no test row must not hide it
    if values.get("train") is None or ("test" in undefined
                                       and _violation(sense, values["train"]) <= SLACK):
        status, text = "undefined", "undefined on " + " and ".join(undefined)
    elif _violation(sense, values["train"]) > SLACK:      # type: ignore[arg-type]
        status = "not_met"
        text = "NOT met on train — likely infeasible or too few steps" + (
            f" ({advice})" if advice else "")
    elif _violation(sense, values["test"]) <= SLACK:      # type: ignore[arg-type]
        status, text = "met", "met"
    elif _consistent(sense, intervals.get("test")):
        status, text = "not_significant", "met on train, not significant on test"
    else:
        status, text = "missed_on_test", "met on train, NOT met on test (significant)"
    # where the selection (validation) or the test could not measure it
    unmeasured = [s for s in ("validation", "test")
                  if values.get(s) is None and (s == "test" or s in values)]
    if status != "undefined" and unmeasured:
        text += f" (undefined on {' and '.join(unmeasured)})"
    return {"status": status, "verdict": text, "train": values.get("train"),
            "test": _listed(intervals.get("test")),
            "values": {s: values.get(s) for s in SPLITS},
            "intervals": {s: _listed(intervals.get(s)) for s in SPLITS}}


def _violation(sense: str, g: float) -> float:
    return max(g, 0.0) if sense == "<=" else abs(g)


def _consistent(sense: str, interval: Sequence[float] | None) -> bool:
    """Whether the test interval is consistent with the constraint (see the module doc)."""
    if interval is None:
        return False
    lo, hi = interval
    return lo <= 0.0 if sense == "<=" else lo <= 0.0 <= hi


def _listed(interval: Sequence[float] | None) -> list[float] | None:
    return None if interval is None else [float(v) for v in interval]


def what_to_try(results: Mapping[str, Any], train_violation: float,
                constraint: str | None = None) -> str:
    """The levers for a constraint violated by ``train_violation`` on train, as one phrase:
    the infeasibility monitor's flag, the value its statement reads that would pass, more
    steps and ``trainer.tune=validation``. ``constraint`` (its name, e.g. ``tpr[Female]``)
    finds its statement in ``problem.constraints``: the lever is what that statement reads
    (``problem.tolerance``, a ``problem.variables`` name, or else the constant in its text),
    and never a tolerance outside its kind's range.

    Example:
        >>> what_to_try({"training": {"steps": 500, "likely_infeasible": False},
        ...              "config": {"problem": {"tolerance": 0.02,
        ...                                     "tolerance_kind": "difference"}}}, 0.068)
        'try trainer.steps=1000, trainer.tune=validation or problem.tolerance=0.09'
        >>> what_to_try({"training": {"steps": 500}, "config": {"problem": {
        ...     "tolerance": 0.05, "constraints": {"eo": "tpr(group=1) >= tpr() - 0.02"}}}},
        ...     0.068, "eo")   # doctest: +NORMALIZE_WHITESPACE
        "try trainer.steps=1000, trainer.tune=validation or a looser constant in its statement
        (problem.constraints.eo: 'tpr(group=1) >= tpr() - 0.02'; it reads no problem.tolerance)"
    """
    training, config = results.get("training", {}), results.get("config", {})
    trainer = config.get("trainer") or {}
    if trainer.get("epochs"):
        more = f"trainer.epochs={2 * float(trainer['epochs']):g}"
    else:
        more = f"trainer.steps={2 * int(training.get('steps') or trainer.get('steps') or 1)}"
    lever = _statement_lever(config.get("problem") or {}, constraint, train_violation)
    flag = ("the infeasibility monitor flags it as likely infeasible: "
            if training.get("likely_infeasible") else "")
    if lever.startswith("no "):         # no tolerance in range passes: the model must do better
        return (f"{flag}{lever}: try a richer model (model=mlp), {more} or "
                "trainer.tune=validation")
    if flag:
        return (f"{flag}try {lever} or a richer model (model=mlp); else {more} or "
                "trainer.tune=validation")
    return f"try {more}, trainer.tune=validation or {lever}"


def _statement_lever(problem: Mapping[str, Any], constraint: str | None,
                     violation: float) -> str:
    """What loosens ``constraint``: the tolerance when its statement reads ``tolerance`` (or
    the statement is unknown), else the numeric ``problem.variables`` it reads, else the
    constant written in its text."""
    key, text = _statement(problem, constraint)
    if text is None:
        return _looser_tolerance(problem, violation)
    try:
        names = free_names(parse(text, "constraint"))
    except ProblemError:        # the run compiled it; a stored copy that does not parse
        return _looser_tolerance(problem, violation)
    if "tolerance" in names:
        return _looser_tolerance(problem, violation)
    variables = problem.get("variables") or {}
    read = sorted(n for n in names if isinstance(variables.get(n), int | float))
    if read:
        return "a looser " + " or ".join(f"problem.variables.{n}" for n in read)
    return (f"a looser constant in its statement (problem.constraints.{key}: {text!r}; it "
            "reads no problem.tolerance)")


def _statement(problem: Mapping[str, Any], constraint: str | None
               ) -> tuple[str | None, str | None]:
    """``(key, statement)`` of ``constraint`` in ``problem.constraints`` (a mapping, or a
    list whose statements are named ``c0, c1, …``); ``(None, None)`` when not found."""
    statements = problem.get("constraints")
    if constraint is None or not statements:
        return None, None
    base = constraint.split("[", 1)[0]     # 'tpr[Female]' / 'sp[Male,0.5]' come from 'tpr'
    if isinstance(statements, Mapping):
        text = statements.get(base)
    elif base.startswith("c") and base[1:].isdigit() and int(base[1:]) < len(statements):
        text = statements[int(base[1:])]
    else:
        text = None
    return (base, text) if isinstance(text, str) else (None, None)


def _looser_tolerance(problem: Mapping[str, Any], violation: float) -> str:
    """A tolerance this model's train values would meet, when ``g`` moves one for one with
    it (``difference`` / ``bound`` tolerances), rounded up to 0.01; a phrase starting "no"
    when that value lies outside the kind's range (the run would refuse it)."""
    tol, kind = problem.get("tolerance"), problem.get("tolerance_kind")
    if isinstance(tol, int | float) and kind in ("difference", "bound"):
        looser = math.ceil((tol + violation) * 100 - 1e-9) / 100
        _, _, high, high_closed, _ = TOLERANCE_RANGES[kind]
        if looser > high or (looser == high and not high_closed):
            span = "[0, 1]" if high_closed else "[0, 1)"
            return (f"no problem.tolerance in its range {span} meets it (it would need "
                    f"{looser:g})")
        return f"problem.tolerance={looser:g}"
    return "a larger problem.tolerance"


def run_verdict(results: Mapping[str, Any], senses: Mapping[str, str],
                solution: str = VERDICT_SOLUTION) -> dict[str, Any]:
    """The ``verdict`` section of ``results.json`` for ``solution``: ``{"solution",
    "constraints": {name: constraint_verdict(...)}}`` from the solution's constraint values
    and intervals on every split; ``senses`` maps each constraint to ``"<="`` or ``"=="``."""
    per_split = results["solutions"][solution]
    out: dict[str, Any] = {}
    for name, sense in senses.items():
        entries = {s: per_split[s]["constraints"][name] for s in SPLITS if s in per_split}
        values = {s: e["value"] for s, e in entries.items()}
        intervals = {s: e.get("interval") for s, e in entries.items()}
        train = values.get("train")
        advice = (what_to_try(results, _violation(sense, train), name)
                  if train is not None and _violation(sense, train) > SLACK else "")
        out[name] = constraint_verdict(sense, values, intervals, advice)
    return {"solution": solution, "constraints": out}


def verdict_lines(verdict: Mapping[str, Any]) -> list[str]:
    """The verdict as lines for a terminal: a heading, then one line per constraint.

    Example:
        >>> v = {"solution": "recommended", "resamples": 1000, "constraints": {
        ...     "eo": constraint_verdict("<=", {"train": 0.0, "test": -0.01},
        ...                              {"test": [-0.03, 0.01]}, "")}}
        >>> print("\\n".join(verdict_lines(v)))
        verdict for the recommended model (test: 95 % bootstrap interval, 1000 resamples):
          eo: met. train g = 0.0000; test g = -0.0100 [-0.0300, 0.0100]
    """
    n = verdict.get("resamples") or 0
    how = f"95 % bootstrap interval, {n} resamples" if n else "no interval: trainer.bootstrap=0"
    lines = [f"verdict for the {verdict['solution'].replace('_', ' ')} model (test: {how}):"]
    if verdict.get("judged"):            # a family's own constraints (paper 004: robust ones)
        lines[0] = lines[0][:-1] + f", judged on {verdict['judged']}:"
    rows = verdict["constraints"]
    # a long list (paper 003's 2·|𝒜|·N parity rows) shows the rows not met and the tightest
    # on train; report.md has them all
    if len(rows) <= MAX_LINES:
        shown = rows
    else:
        tightest = _tightest(rows)
        shown = {k: v for k, v in rows.items() if v["verdict"] != "met" or k == tightest}
    for name, v in shown.items():
        lines.append(f"  {name}: {v['verdict']}. {_evidence(v)}")
    if len(shown) < len(rows):
        met = sum(v["verdict"] == "met" for v in rows.values())
        lines.append(f"  ({met} of {len(rows)} constraints met; shown: those not met and the "
                     "tightest on train; report.md lists all)")
    if not rows:
        lines.append("  (the problem has no constraint)")
    return lines


def _tightest(rows: Mapping[str, Any]) -> str:
    """The constraint with the largest train ``g`` (undefined ones last)."""
    def train_g(name: str) -> float:
        g = rows[name]["values"]["train"]
        return -math.inf if g is None else g
    return max(rows, key=train_g)


def _evidence(v: Mapping[str, Any]) -> str:
    def g(x: float | None) -> str:
        return "undefined" if x is None else f"{x:.4f}"

    test = f"test g = {g(v['values']['test'])}"
    if v["test"] is not None:
        test += f" [{v['test'][0]:.4f}, {v['test'][1]:.4f}]"
    text = f"train g = {g(v['values']['train'])}; {test}"
    for label, key in (("noisy groups' g", "noisy"), ("true groups' violation",
                                                      "true_violation")):
        if key in v:     # beside a family's verdict (paper 004's robust runs), labelled
            text += (f"; {label}: train {g(v[key].get('train'))}, test "
                     f"{g(v[key].get('test'))}")
    return text
