"""GSM8K scoring: strict `#### <answer>` and flexible last-number modes, format score, registry name."""

import pytest

from verl_lite.reward.gsm8k import compute_score, extract_solution
from verl_lite.reward.scorers import default_compute_score


@pytest.mark.parametrize(
    "text, strict, flexible",
    [
        ("She pays 3 * 4 = 12 dollars.\n#### 12", "12", "12"),
        ("#### 5 first, then corrected:\n#### 1,000", "1,000", "1,000"),  # the last #### wins
        ("The answer is 72.", None, "72."),  # no '####': strict finds nothing
        ("####72", None, "72"),  # strict needs the space after ####
        ("#### -3", "-3", "-3"),
        ("no numbers at all . ,", None, None),  # bare '.' and ',' are not numbers
        ("I think 7 ... or 8.", None, "8."),
    ],
)
def test_extract_strict_and_flexible(text, strict, flexible):
    assert extract_solution(text, "strict") == strict
    assert extract_solution(text, "flexible") == flexible


def test_only_the_last_300_characters_are_searched():
    early = "#### 42\n" + "x" * 300
    assert extract_solution(early, "strict") is None
    assert extract_solution("x" * 1000 + "#### 42", "strict") == "42"


def test_scores_right_wrong_and_format():
    assert compute_score("so #### 18", "18") == 1.0
    assert compute_score("so #### 1,000.", "1000") == 1.0  # separators and a full stop forgiven
    assert compute_score("so #### 17", "18") == 0.0
    assert compute_score("so #### 17", "18", format_score=0.1) == 0.1  # right format, wrong answer
    assert compute_score("the answer is 18", "18", format_score=0.1) == 0.0  # no answer: no format score
    assert compute_score("the answer is 18", "18", method="flexible") == 1.0
    assert compute_score("so #### 18", "18", score=2.0) == 2.0
    with pytest.raises(ValueError, match="method='loose'"):
        extract_solution("#### 1", "loose")


def test_registered_under_verls_data_source():
    assert default_compute_score("openai/gsm8k", "Half of 36 is 18.\n#### 18", "18", {}) == 1.0
    assert default_compute_score("openai/gsm8k", "The answer is 18", "18", {}) == 0.0  # strict by default
