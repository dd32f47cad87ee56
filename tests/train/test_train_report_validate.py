"""``validate_results``' cached validator (the schema with its references inlined) accepts and
refuses exactly the documents ``jsonschema.validate`` does with the shipped schema, with the
same error."""

from __future__ import annotations

import copy

import jsonschema
import pytest

from fairgames.train import load_schema, run, validate_results
from fairgames.train.results.report import _inline_refs, _validators

SHORT = ["data=synthetic", "data.n=600", "trainer=smoke", "trainer.steps=4",
         "trainer.log_every=4", "trainer.snapshot_every=2", "trainer.bootstrap=0",
         "trainer.checkpoint_every=0", "trainer.plots=false", "trainer.tensorboard=false",
         "problem=equal_opportunity"]


def breakages(doc: dict) -> list[dict]:
    """Documents that break the schema in different places (and one that does not)."""
    out = []
    train = ("solutions", "final", "train")
    for change in ("group_string", "group_missing", "violation_negative", "label_real",
                   "extra_key", "multiplier_null", "untouched"):
        d = copy.deepcopy(doc)
        metrics = d[train[0]][train[1]][train[2]]
        group = next(k for k in metrics["groups"] if k != "overall")
        if change == "group_string":
            metrics["groups"][group]["tpr"] = "0.5"
        elif change == "group_missing":
            del metrics["groups"][group]["fpr"]
        elif change == "violation_negative":
            next(iter(metrics["constraints"].values()))["violation"] = -1.0
        elif change == "label_real":
            metrics["label_kind"] = "real"
        elif change == "extra_key":
            d["solutions"]["final"]["extra"] = {}
        elif change == "multiplier_null":
            d["training"]["multipliers"][next(iter(d["training"]["multipliers"]))] = None
        out.append(d)
    return out


def test_the_cached_validator_agrees_with_jsonschema(compose_cfg):
    doc = run(compose_cfg(*SHORT)).results
    schema = load_schema()
    outcomes = []
    for d in breakages(doc):
        try:
            jsonschema.validate(d, schema)
            expected = None
        except jsonschema.ValidationError as e:
            expected = (e.message, list(e.absolute_path), list(e.schema_path))
        try:
            validate_results(d)
            got = None
        except jsonschema.ValidationError as e:
            got = (e.message, list(e.absolute_path), list(e.schema_path))
        assert got == expected
        outcomes.append(expected is None)
    assert outcomes == [False] * 6 + [True]


def test_the_inlined_schema_has_no_reference_and_refuses_a_recursive_one():
    _, fast = _validators()
    assert "$ref" not in str(fast.schema.get("properties"))
    defs = {"a": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}}}
    with pytest.raises(ValueError, match="cannot inline the reference '#/\\$defs/a'"):
        _inline_refs({"$ref": "#/$defs/a"}, defs, ())
