"""A user's YAML that extends ppo_trainer, as verl's recipes write it (`--config-path=<dir>
--config-name=<file>`, `defaults: [ppo_trainer, _self_]`, often `hydra.searchpath:
[file://verl/trainer/config]`): verl_lite's ppo_trainer is found from any folder, also from one holding
a verl checkout; the file's values meet the support table and the domains as command-line values do;
what Hydra refuses in it is one line naming the file and the key, never a traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from verl_lite.config.compose import build_config, register_schema
from verl_lite.config.errors import ConfigError
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.config.user_config import check_user_config, not_verl_lites

RECIPE = """\
hydra:
  searchpath:
    - file://verl/trainer/config
defaults:
  - ppo_trainer
  - _self_
data:
  train_files: verl_lite://arith/train.parquet
  val_files: verl_lite://arith/test.parquet
  max_prompt_length: 16
  train_batch_size: 8
actor_rollout_ref:
  model:
    path: verl_lite://tiny-qwen2-arith
    lora_rank: 0
    lora_alpha: 0
algorithm:
  adv_estimator: grpo
"""
# a stand-in for verl's own verl/trainer/config/ppo_trainer.yaml: keys verl_lite does not have
VERLS_OWN = "defaults:\n  - _self_\nactor_rollout_ref:\n  actor:\n    fsdp_config:\n      limit_all_gathers: true\nverl_only: 1\n"


def write(folder, name: str, text: str):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(textwrap.dedent(text))
    return folder


def composed(folder, name: str, *overrides):
    register_schema()
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        return compose(name, overrides=list(overrides))


@pytest.fixture
def verl_checkout(tmp_path, monkeypatch):
    """The working directory holds a verl checkout (its verl/trainer/config/ppo_trainer.yaml)."""
    root = tmp_path / "verl_repo"
    write(root / "verl" / "trainer" / "config", "ppo_trainer", VERLS_OWN)
    monkeypatch.chdir(root)
    return root


@pytest.mark.parametrize("where", ["anywhere", "verl_checkout"])
def test_a_recipe_yaml_extends_verl_lites_ppo_trainer(tmp_path, monkeypatch, where, request):
    if where == "verl_checkout":
        request.getfixturevalue("verl_checkout")
    else:
        monkeypatch.chdir(tmp_path)
    folder = write(tmp_path / "recipe", "my_grpo", RECIPE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Hydra's warning about verl's folder is not shown either
        raw = composed(folder, "my_grpo", "actor_rollout_ref.rollout.n=2")
        assert check_user_config([f"--config-path={folder}", "--config-name=my_grpo"]) is None
    assert OmegaConf.get_type(raw) is PPOTrainerConfig and not_verl_lites(raw) is None
    assert "verl_only" not in raw and "limit_all_gathers" in raw.actor_rollout_ref.actor.fsdp_config
    cfg = build_config(raw)
    assert (cfg.data.max_prompt_length, cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n) == (
        16,
        8,
        2,
    )
    assert cfg.data.max_response_length == 512  # verl's default: the rest is ppo_trainer's


def test_a_files_key_no_field_holds_is_refused_not_dropped(tmp_path):
    """Under a section only verl 0.9.1's facts add (reward, distillation, ...) Hydra takes any key; the
    typed config has no field for it, so it would be dropped. One line each instead; a verl 0.9
    spelling (mapped on the command line) names the key to write in the file."""
    folder = write(
        tmp_path,
        "u",
        "defaults: [ppo_trainer, _self_]\nreward:\n  reward_kwargs:\n    max_resp_len: 100\n"
        "distillation:\n  bogus: 1\n",
    )
    with pytest.raises(ConfigError) as info:
        build_config(composed(folder, "u"))
    assert info.value.problems == [
        "reward.reward_kwargs.max_resp_len (in a config file) is verl 0.9's spelling of "
        "reward_model.reward_kwargs.max_resp_len, which verl_lite maps on the command line only; in a file, "
        "write reward_model.reward_kwargs.max_resp_len",
        "distillation.bogus (in a config file) is not a key of verl_lite's config (verl's ppo_trainer keys)",
    ]


def test_the_files_values_meet_the_support_table_and_the_domains(tmp_path):
    from verl_lite.config.keys import links_in
    from verl_lite.config.values import check_values

    folder = write(
        tmp_path,
        "mt",
        "defaults: [ppo_trainer, _self_]\nactor_rollout_ref:\n  rollout:\n    multi_turn:\n"
        "      use_inference_chat_template: true\n",
    )
    with pytest.raises(
        ConfigError, match=r"multi_turn.use_inference_chat_template=True is not supported by verl_lite"
    ):
        build_config(composed(folder, "mt"))
    write(folder, "bad", "defaults: [ppo_trainer, _self_]\ndata:\n  max_prompt_length: -1\n")
    raw = composed(folder, "bad")
    links = links_in(raw)
    cfg = build_config(raw)
    cfg.algorithm.filter_groups.metric = "acc"  # run=None reads every key, DAPO's too
    assert check_values(cfg, links=links) == ["data.max_prompt_length=-1 must be a positive integer"]


def lines_for(tmp_path, name: str, text: str | None, *extra) -> str:
    folder = write(tmp_path, name, text) if text is not None else tmp_path
    line = check_user_config([f"--config-path={folder}", f"--config-name={name}", *extra])
    assert line and "\n" not in line, line
    return line


def test_what_hydra_refuses_in_the_file_is_one_line_naming_file_and_key(tmp_path):
    head = "defaults:\n  - ppo_trainer\n  - _self_\n"
    line = lines_for(tmp_path, "typo", head + "data:\n  train_batch_szie: 8\n")
    assert line == (
        f"{tmp_path}/typo.yaml: data.train_batch_szie is not a key of verl_lite's config (verl's ppo_trainer "
        "keys); did you mean data.train_batch_size?"
    )
    line = lines_for(tmp_path, "typed", head + "data:\n  train_batch_size: many\n")
    assert line.startswith(f"{tmp_path}/typed.yaml: data.train_batch_size: Value 'many'")
    line = lines_for(
        tmp_path, "group", "defaults:\n  - ppo_trainer\n  - actor@actor_rollout_ref.actor: dp_actor\n"
    )
    assert line.startswith(f"{tmp_path}/group.yaml: its defaults name 'actor/dp_actor'")
    assert lines_for(tmp_path, "absent", None).startswith(
        f"--config-name=absent: no absent.yaml in {tmp_path}"
    )
    line = lines_for(tmp_path, "recipe", RECIPE, "trainer.total_epochs=some")
    assert line == (
        "trainer.total_epochs=some: Value 'some' of type 'str' could not be converted to Integer; "
        "give it a whole number"
    )


def test_a_defaults_cycle_a_tab_and_an_empty_file_are_one_line_naming_the_file(tmp_path):
    """Hydra recursed until Python's limit (a cycle), printed a YAML scanner's report (a tab), or let
    an empty file through to a wrong reason (that its folder held verl's ppo_trainer)."""
    write(tmp_path, "mine", "defaults:\n  - ppo_trainer\n  - shared\n  - _self_\n")
    write(tmp_path, "shared", "defaults:\n  - mine\n")
    assert lines_for(tmp_path, "mine", None) == (
        f"{tmp_path}/mine.yaml: its defaults form a cycle (mine.yaml -> shared.yaml -> mine.yaml), which "
        "Hydra would follow forever; a file's defaults list ppo_trainer, other files of yours and _self_, "
        "never a file that lists it"
    )
    head = "defaults:\n  - ppo_trainer\n  - _self_\n"
    assert lines_for(tmp_path, "tabbed", head + "trainer:\n\ttotal_epochs: 2\n") == (
        f"{tmp_path}/tabbed.yaml: line 5 has a tab; YAML indents with spaces only"
    )
    assert lines_for(tmp_path, "blank", "# nothing yet\n") == (
        f"{tmp_path}/blank.yaml is empty (or holds only comments): a config file starts with "
        "`defaults: [ppo_trainer, _self_]` and sets keys below it"
    )


def test_a_command_line_value_of_the_wrong_type_is_one_line_for_verl_lites_own_configs_too():
    """Hydra's own report of these is seven lines (exit 1); for ppo_trainer and demo as well as a
    user's file, the line names the override, Hydra's reason and what to give instead."""

    def line(*overrides, name="demo"):
        return check_user_config([f"--config-name={name}", *overrides])

    assert line("trainer.total_epochs=abc", name="ppo_trainer") == (
        "trainer.total_epochs=abc: Value 'abc' of type 'str' could not be converted to Integer; give it a whole number"
    )
    assert line("actor_rollout_ref.actor.optim.lr=fast").endswith(
        "could not be converted to Float; give it a number"
    )
    assert line("trainer.val_before_train=maybe") == (
        "trainer.val_before_train=maybe: Value 'maybe' is not a valid bool (type str); give it true or false"
    )
    assert line("actor_rollout_ref.rollout.engine_kwargs=null") == (
        "actor_rollout_ref.rollout.engine_kwargs=null: field 'actor_rollout_ref.rollout.engine_kwargs' is not "
        "Optional; give it a value, or leave it out for its default"
    )
    # a deletion alone (no key=value) is checked too; the schema's keys cannot be removed
    assert line("~trainer.logger") == (
        "~trainer.logger: TrainerConfig (DictConfig) does not support deletion; a key of the config cannot "
        "be removed; set it instead (trainer.logger=<value>)"
    )
    assert line("actor_rollout_ref.actor.optim=5").endswith(
        "; it is a section: set its keys (actor_rollout_ref.actor.optim.<name>=...), not the section"
    )
    assert line("actor_rollout_ref.model.override_config=[1]") == (
        "actor_rollout_ref.model.override_config=[1]: Cannot merge DictConfig with ListConfig; it takes keys: "
        "set them one by one (actor_rollout_ref.model.override_config.<name>=...)"
    )
    # values of the right type, and no values at all, pass (the domains judge them later)
    assert (
        line("trainer.total_epochs=2", "actor_rollout_ref.actor.optim.lr=1e-6", "hydra.run.dir=/tmp/x")
        is None
    )
    assert line() is None


def test_verls_own_ppo_trainer_as_the_primary_config_is_refused_in_one_line(verl_checkout):
    folder = verl_checkout / "verl" / "trainer" / "config"
    line = check_user_config([f"--config-path={folder}", "--config-name=ppo_trainer"])
    assert line.startswith(f"{folder}/ppo_trainer.yaml does not extend verl_lite's ppo_trainer")


def test_the_cli_from_a_verl_checkout_says_one_line_and_no_traceback(tmp_path, verl_checkout):
    """The run that ended in `ConfigAttributeError: Key 'limit_all_gathers' is not in struct`."""
    folder = write(tmp_path / "recipe", "my_grpo", RECIPE)
    for extra in (["data.max_prompt_length=-1"], []):
        config = [
            "--config-path",
            str(verl_checkout / "verl" / "trainer" / "config"),
            "--config-name=ppo_trainer",
        ]
        args = [f"--config-path={folder}", "--config-name=my_grpo", *extra] if extra else config
        proc = subprocess.run(
            [sys.executable, "-m", "verl_lite.main_ppo", *args], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith("verl_lite: "), line
        assert ("data.max_prompt_length=-1 must be" in line) if extra else ("does not extend" in line), line
