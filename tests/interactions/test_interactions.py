"""Interactions: verl's GSM8K interaction and YAML format; bad files as one line."""

import asyncio

import pytest

from tests.helpers.agent import VERL_GSM8K_INTERACTION_CONFIG, write_yaml
from verl_lite.interactions.gsm8k import CORRECT, INCORRECT, Gsm8kInteraction
from verl_lite.interactions.registry import build_interactions, check_interaction_config


def test_verls_gsm8k_interaction_checks_the_last_answer(tmp_path):
    ((name, interaction),) = build_interactions(
        write_yaml(tmp_path / "i.yaml", VERL_GSM8K_INTERACTION_CONFIG)
    ).items()
    assert (
        name == "gsm8k"
        and isinstance(interaction, Gsm8kInteraction)
        and interaction.config["name"] == "gsm8k"
    )

    async def episode():
        i = await interaction.start_interaction(None, name="gsm8k", query="q", ground_truth="18")
        wrong = await interaction.generate_response(i, [{"role": "assistant", "content": "#### 17"}])
        flexible_only = await interaction.generate_response(i, [{"role": "assistant", "content": "it is 18"}])
        right = await interaction.generate_response(
            i,
            [
                {"role": "assistant", "content": "#### 1"},
                {"role": "user", "content": "no"},
                {"role": "assistant", "content": "so #### 18"},
            ],
        )
        await interaction.finalize_interaction(i)
        return wrong, flexible_only, right

    wrong, flexible_only, right = asyncio.run(episode())
    assert wrong == (False, INCORRECT, 0.0, {}) and flexible_only[:3] == (False, INCORRECT, 0.0)
    assert right == (True, CORRECT, 1.0, {})


def test_the_name_defaults_to_the_class_name(tmp_path):
    path = write_yaml(
        tmp_path / "i.yaml",
        {
            "interaction": [
                {
                    "class_name": "tests.interactions.user_interactions.CountingInteraction",
                    "config": {"turns": 3},
                }
            ]
        },
    )
    ((name, interaction),) = build_interactions(path).items()
    assert name == "counting" and interaction.turns == 3


USER = "tests.interactions.user_interactions"


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("interaction: [", "is not valid YAML"),
        ({"interactions": []}, "must hold a non-empty list `interaction:`"),
        (
            {"interaction": [{"class_name": "verl.interactions.weather_interaction.WeatherInteraction"}]},
            "WeatherInteraction is not supported by verl_lite",
        ),
        ({"interaction": [{"class_name": f"{USER}.NotAsync"}]}, "must be async methods"),
        ({"interaction": [{"class_name": f"{USER}.CountingInteraction", "cfg": {}}]}, "unknown keys ['cfg']"),
        (
            {
                "interaction": [
                    {"class_name": f"{USER}.CountingInteraction"},
                    {"class_name": f"{USER}.CountingInteraction"},
                ]
            },
            "the name 'counting' is used twice",
        ),
        (
            {
                "interaction": [
                    {
                        "name": "g",
                        "class_name": "verl.interactions.gsm8k_interaction.Gsm8kInteraction",
                        "config": {"x": 1},
                    }
                ]
            },
            "does not read",
        ),
    ],
)
def test_each_bad_config_is_one_line(tmp_path, content, fragment):
    (problem,) = check_interaction_config(write_yaml(tmp_path / "i.yaml", content))
    assert fragment in problem and "\n" not in problem
