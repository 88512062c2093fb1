"""Boxed-answer extraction and the documented (limited) equivalence of the math scorer."""

import pytest

from verl_lite.reward.math_answer import compute_score, is_equiv, last_boxed_only_string, remove_boxed
from verl_lite.reward.scorers import MATH_SOURCES, default_compute_score


def test_last_boxed_with_nested_braces():
    text = r"First \boxed{1}, finally $\boxed{\frac{1}{2}}$ done"
    assert last_boxed_only_string(text) == r"\boxed{\frac{1}{2}}"
    assert remove_boxed(last_boxed_only_string(text)) == r"\frac{1}{2}"
    assert remove_boxed(last_boxed_only_string(r"so $\boxed 7$.")) == "7"
    assert remove_boxed(last_boxed_only_string(r"\fbox{x+1}")) == "x+1"
    assert last_boxed_only_string(r"cut off \boxed{\frac{1}{2") is None
    assert last_boxed_only_string("no box") is None


@pytest.mark.parametrize(
    "answer, truth",
    [
        (r"\frac{1}{2}", "1/2"),
        ("0.5", r"\frac{1}{2}"),
        (r"\dfrac12", r"\frac{1}{2}"),
        (r"-\frac{3}{4}", "-0.75"),
        ("10", "10.0"),
        (r"5\text{ cm}", "5"),
        (r"90^\circ", "90"),
        (r"50\%", "50"),
        ("x = 3", "3"),
        ("1,000", "1000"),
        (r"\left( 1, 2 \right)", "(1,2)"),
        (r"\text{(A)}", "(A)"),
        (r"\sqrt2", r"\sqrt{2}"),
    ],
)
def test_equal_forms(answer, truth):
    assert is_equiv(answer, truth)


@pytest.mark.parametrize(
    "answer, truth",
    [
        (r"\sqrt{4}", "2"),  # no evaluation of radicals
        ("x+1", "1+x"),  # no algebra
        ("0.333", "1/3"),  # exact rationals only
        ("(2,1)", "(1,2)"),  # tuples are ordered
        ("3", "4"),
        (r"\frac{1}{0}", "1/0 + 1"),
    ],
)
def test_unequal_forms(answer, truth):
    assert not is_equiv(answer, truth)


def test_score_uses_the_last_box_and_accepts_boxed_truths():
    assert compute_score(r"Try \boxed{3}. No: \boxed{\frac{2}{4}}", "1/2") == 1.0
    assert compute_score(r"\boxed{3} then \boxed{4}", "3") == 0.0
    assert compute_score("The answer is 1/2", "1/2") == 0.0  # not boxed
    assert compute_score(r"\boxed{0.5}", r"so the answer is $\boxed{\frac12}$") == 1.0


def test_registered_under_verls_data_sources():
    for source in ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval"):
        assert source in MATH_SOURCES
        assert default_compute_score(source, r"\boxed{\dfrac{1}{2}}", "0.5", {}) == 1.0
