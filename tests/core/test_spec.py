"""The DSL: shipped files load; every bad-input class names the file and the field."""

from pathlib import Path

import pytest
import yaml
from cli_helpers import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.spec import load_experiment, load_hypothesis, parse_yaml
from framework.errors import SpecError

BASE = (ROOT / "hypotheses" / "eagle3_allreduce.yaml").read_text()


def write(tmp_path: Path, text: str, name: str = "h.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def mutate(tmp_path: Path, edit) -> Path:
    data = yaml.safe_load(BASE.replace('"on"', "'on'").replace('"off"', "'off'"))
    edit(data)
    return write(tmp_path, yaml.safe_dump(data, sort_keys=False))


@pytest.mark.parametrize("path", sorted((ROOT / "hypotheses").glob("*.yaml")))
def test_shipped_hypotheses_load(path):
    h = load_hypothesis(path)
    # a search's space and confirmation stand for them, and a bisection's versions and ends
    assert (h.predictions and h.factors) or h.search is not None or h.bisect is not None


@pytest.mark.parametrize("path", sorted((ROOT / "experiments").glob("*.yaml")))
def test_shipped_experiments_load(path):
    assert load_experiment(path).tp_size >= 1


def test_on_and_off_stay_level_names():
    h = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")
    assert set(h.factors["fusion"].levels) == {"on", "off"}


CASES = [
    (
        "unknown factor",
        lambda d: d["predictions"][0].update(factor="fuson"),
        "predictions[0].factor",
        "unknown factor 'fuson'",
    ),
    (
        "unknown level",
        lambda d: d["predictions"][1].update(level="maybe"),
        "predictions[1].level",
        "unknown level 'maybe'",
    ),
    (
        "unknown where level",
        lambda d: d["predictions"][0]["where"].update(decoding="eagle9"),
        "predictions[0].where.decoding",
        "unknown level",
    ),
    ("margin zero", lambda d: d["predictions"][0].update(margin=0), "predictions[0].margin", "greater than 0"),
    ("margin negative", lambda d: d["predictions"][0].update(margin=-0.1), "predictions[0].margin", "greater than 0"),
    ("alpha too big", lambda d: d["design"].update(alpha=0.5), "design.alpha", "less than 0.5"),
    ("alpha zero", lambda d: d["design"].update(alpha=0), "design.alpha", "greater than 0"),
    ("unknown field", lambda d: d["design"].update(launchs=3), "design.launchs", "allowed:"),
    ("unknown kind", lambda d: d["predictions"][0].update(kind="bigger"), "predictions[0]", "unknown prediction kind"),
    (
        "bad reference",
        lambda d: d["factors"]["fusion"].update(reference="maybe"),
        "factors.fusion",
        "reference 'maybe' is not a level",
    ),
    ("free factor", lambda d: d["predictions"][0].pop("where"), "predictions[0].where", "must be pinned"),
    ("unknown metric", lambda d: d.update(metric="tok_per_joule"), "metric", "decode_tok_s"),
    ("duplicate id", lambda d: d["predictions"][1].update(id="neutral_for_baseline"), "predictions[1].id", "duplicate"),
]


@pytest.mark.parametrize("label,edit,field,fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_input_names_file_and_field(tmp_path, label, edit, field, fragment):
    path = mutate(tmp_path, edit)
    with pytest.raises(SpecError) as info:
        load_hypothesis(path)
    assert info.value.file == str(path)
    assert info.value.field == field, str(info.value)
    assert fragment in info.value.message, str(info.value)


def test_bad_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "name: x\nfactors: [a\n")
    with pytest.raises(SpecError, match=r"line \d+, column \d+: invalid YAML"):
        load_hypothesis(path)


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="file not found"):
        load_hypothesis(tmp_path / "nope.yaml")


def test_bad_regex(tmp_path):
    path = write(tmp_path, (ROOT / "hypotheses" / "cuda13_unblocks_fusion.yaml").read_text().replace(
        '"No supported CUDA architectures found for major versions"', '"(unclosed"'))
    with pytest.raises(SpecError) as info:
        load_hypothesis(path)
    assert info.value.field == "predictions[0].match"


@settings(max_examples=60, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-5, max_value=5))
def test_margin_valid_iff_strictly_between_zero_and_one(tmp_path_factory, margin):
    path = mutate(tmp_path_factory.mktemp("m"), lambda d: d["predictions"][0].update(margin=margin))
    if 0 < margin < 1:
        assert load_hypothesis(path).predictions[0].margin == margin
    else:
        with pytest.raises(SpecError, match=r"predictions\[0\]\.margin"):
            load_hypothesis(path)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_parser_never_crashes_on_arbitrary_text(text):
    try:
        parse_yaml(text, "x.yaml")
    except SpecError as exc:
        assert exc.file == "x.yaml"


def test_launches_failure_class_is_checked():
    from framework.core.spec import Launches

    ok = Launches(id="x", kind="launches", where={}, expect="fails", failure_class="port_in_use")
    assert ok.failure_class == "port_in_use"
    with pytest.raises(Exception, match="bad_flag"):  # the error lists the allowed classes
        Launches(id="x", kind="launches", where={}, expect="fails", failure_class="port_taken")
    with pytest.raises(Exception, match="expect: fails"):
        Launches(id="x", kind="launches", where={}, expect="starts", failure_class="port_in_use")


def test_launches_rate_is_a_probability_with_a_clear_error(tmp_path):
    text = (ROOT / "hypotheses" / "cuda13_unblocks_fusion.yaml").read_text()
    assert load_hypothesis(write(tmp_path, text)).predictions[0].rate == 0.5  # "more often than not"
    for bad in ("1.0", "0", "-0.2"):
        path = write(tmp_path, text.replace("    expect: fails\n", f"    expect: fails\n    rate: {bad}\n", 1))
        with pytest.raises(SpecError, match="strictly between 0 and 1") as info:
            load_hypothesis(path)
        assert info.value.field == "predictions[0].rate"
    path = write(tmp_path, text.replace("    expect: fails\n", "    expect: fails\n    rate: 0.9\n", 1))
    assert load_hypothesis(path).predictions[0].rate == 0.9


@pytest.mark.parametrize("switch", [True, False])
def test_design_sequential_true_in_yaml_means_what_the_command_line_form_means(tmp_path, switch):
    """`design.sequential: true` in a file is `design.sequential.enabled: true`, as `design.sequential=true` is."""
    h = load_hypothesis(mutate(tmp_path, lambda d: d["design"].update(sequential=switch)))
    assert h.design.sequential.enabled is switch
    assert h.design.sequential.block == 2 and h.design.sequential.max_launches is None
    nested = load_hypothesis(mutate(tmp_path, lambda d: d["design"].update(sequential={"enabled": switch})))
    assert nested.design == h.design


def test_estimand_is_mean_by_default_typical_on_request_and_checked(tmp_path):
    assert load_hypothesis(mutate(tmp_path, lambda d: None)).predictions[0].estimand == "mean"
    h = load_hypothesis(mutate(tmp_path, lambda d: d["predictions"][0].update(estimand="typical")))
    assert h.predictions[0].estimand == "typical"
    with pytest.raises(SpecError, match="'mean' or 'typical'") as info:
        load_hypothesis(mutate(tmp_path, lambda d: d["predictions"][0].update(estimand="median")))
    assert info.value.field == "predictions[0].estimand"
    with pytest.raises(SpecError, match="no anytime-valid test") as info:
        load_hypothesis(mutate(tmp_path, lambda d: (d["predictions"][1].update(estimand="typical"),
                                                    d["design"].update(analysis="anytime"))))
    assert info.value.field == "predictions[1].estimand"
    with pytest.raises(SpecError) as info:  # an interaction has no rank test: the field is not one of its fields
        load_hypothesis(mutate(tmp_path, lambda d: d["predictions"][2].update(estimand="typical")))
    assert "estimand" in info.value.field
