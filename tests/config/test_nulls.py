"""null where verl's config lets a key hold it (tests/config/verl_nullable.py, read from verl's files by
scripts/verl_nullable_keys.py): every such key composes null, and the run takes it or refuses it in
one line naming the key; a key whose verl default is null takes it silently. The line that broke:
verl's main CI script (tests/special_e2e/ppo_trainer/run_function_reward.sh) passes
`custom_reward_function.name=null` in its default mode."""

import pytest
from omegaconf import OmegaConf

from tests.config.verl_nullable import VERL_NULLABLE
from verl_lite.config import keys
from verl_lite.config.compose import build_config, compose_config
from verl_lite.config.errors import ConfigError
from verl_lite.config.run import Run
from verl_lite.config.values import check_values
from verl_lite.roles import run_of

SHARED = [k for k in VERL_NULLABLE if keys.is_known(k)]
RUN_FUNCTION_REWARD = ["custom_reward_function.path=null", "custom_reward_function.name=null"]


def problems_of(raw) -> list[str]:
    """What main_ppo reports before Ray for a composed config, in its order: the support table, the
    values before the roles are known (preflight.check_early), then with them (preflight.prepare)."""
    try:
        cfg = build_config(raw)
    except ConfigError as e:
        return list(e.problems)
    early = check_values(cfg, Run(0, False, False, False, 0, False, links=keys.links_of(cfg)))
    return early or check_values(cfg, run_of(cfg, 0))


@pytest.fixture(scope="module")
def composed():
    return compose_config([], "ppo_trainer")  # verl's defaults: a critic (gae), so its keys are read


def test_the_facts_cover_every_kind_of_nullable_key():
    reasons = {v.split(":")[0].split(" in ")[0] for v in VERL_NULLABLE.values()}
    assert reasons == {"default null", "Optional", "no type"}, reasons
    assert len(SHARED) > 180, len(SHARED)


def test_every_key_verl_lets_be_null_composes_null_and_is_taken_or_refused_by_name(composed):
    raw, before = composed, OmegaConf.to_container(composed, resolve=False)
    wrong = []
    for key in SHARED:
        written = keys.written_value(raw, key)
        OmegaConf.update(raw, key, None, merge=True)  # what Hydra does with `key=null`
        problems = problems_of(raw)
        OmegaConf.update(raw, key, written, merge=False)
        own = [p for p in problems if p.startswith(f"{key}=")]
        if problems != own or len(own) > 1 or (own and VERL_NULLABLE[key] == "default null"):
            wrong.append((key, problems))
    assert not wrong, wrong
    assert OmegaConf.to_container(raw, resolve=False) == before  # each key was put back


def test_verls_main_ci_script_in_its_default_mode_takes_a_null_reward_function_name():
    assert problems_of(compose_config(RUN_FUNCTION_REWARD, "demo")) == []


def test_a_null_name_is_refused_once_the_function_is_read(tmp_path):
    score = tmp_path / "score.py"
    score.write_text(
        "def my_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"
    )
    raw = compose_config([f"custom_reward_function.path={score}", "custom_reward_function.name=null"], "demo")
    assert problems_of(raw) == ["custom_reward_function.name=null must be a string"]


def test_a_null_that_means_nothing_is_one_line_naming_the_key(composed):
    raw = compose_config([], "demo")
    OmegaConf.update(raw, "trainer.val_before_train", None, merge=True)
    OmegaConf.update(raw, "data.max_prompt_length", None, merge=True)
    OmegaConf.update(
        raw, "algorithm.filter_groups.metric", "acc", merge=True
    )  # check_values(cfg) reads every key
    assert problems_of(raw) == [
        "data.max_prompt_length=null must be a positive integer",
        "trainer.val_before_train=null must be true or false",
    ]
    cfg = build_config(raw)
    assert check_values(cfg, links=keys.links_of(cfg)) == [
        "data.max_prompt_length=null must be a positive integer",
        "trainer.val_before_train=null must be true or false",
    ]
