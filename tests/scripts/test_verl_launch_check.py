"""scripts/verl_launch_check.py's own logic, on verl's text (no verl checkout, no runs): a CI step's
environment, the docs' command lines, the tiny sizes that keep a script's mini-batches per step, and
the recorded trainer call of a script run by bash."""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import verl_launch_args as check  # noqa: E402
import verl_launches as catalogue  # noqa: E402

ARR = "actor_rollout_ref"


def test_a_ci_steps_environment_is_the_steps_and_its_exports():
    run = (
        "ray stop --force\n"
        "export TQ_ZERO_COPY_SERIALIZATION=True\n"
        "TRAIN_FILES=$HOME/data/geo3k/train.parquet \\\n"
        '  ADV_ESTIMATOR=grpo LORA_EXCLUDE=".*visual.*" \\\n'
        "  bash tests/special_e2e/ppo_trainer/run_function_reward.sh\n"
        "# ADV_ESTIMATOR=remax bash tests/special_e2e/ppo_trainer/run_function_reward.sh\n"
    )
    assert list(catalogue._commands(run)) == [
        (
            {
                "TQ_ZERO_COPY_SERIALIZATION": "True",
                "TRAIN_FILES": "$HOME/data/geo3k/train.parquet",
                "ADV_ESTIMATOR": "grpo",
                "LORA_EXCLUDE": ".*visual.*",
            },
            "tests/special_e2e/ppo_trainer/run_function_reward.sh",
        )
    ]


def test_the_tiny_sizes_keep_the_mini_batches_per_step_and_divide():
    # verl's LoRA GRPO script: one mini-batch per step (16 / 16), 5 responses each
    sizes = check.Sizes.of(
        ["data.train_batch_size=16", f"{ARR}.actor.ppo_mini_batch_size=16", f"{ARR}.rollout.n=5"]
    )
    assert (sizes.mini, sizes.micro) == (8, 2)  # 8 x 5 / 2 workers = 20 per worker
    sizes = check.Sizes.of(["data.train_batch_size=512", f"{ARR}.actor.ppo_mini_batch_size=128"])
    assert (sizes.mini, sizes.micro) == (2, 1)  # four per step, one response each: 1 per worker
    sizes = check.Sizes.of(["data.train_batch_size=1024"])  # verl's mini 256, n 1
    assert sizes.mini == 2
    sizes = check.Sizes.of(["data.train_batch_size=1024", f"{ARR}.actor.ppo_mini_batch_size=128"])
    assert sizes.mini == 2, "8 per step would leave a worker without a response: fewer, larger ones"


def test_micro_sizes_per_gpu_and_deprecated_global_ones():
    sizes = check.Sizes(mini=2, micro=1)
    assert check.swap(f"{ARR}.actor.ppo_micro_batch_size_per_gpu", "16", sizes, "/rm") == "1"
    assert check.swap(f"{ARR}.actor.ppo_micro_batch_size", "64", sizes, "/rm") == "2"  # 1 per worker
    assert check.swap(f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu", "40", sizes, "/rm") == "2"
    assert check.swap(f"{ARR}.rollout.tensor_model_parallel_size", "4", sizes, "/rm") == "2"
    assert check.swap(f"{ARR}.actor.fsdp_config.fsdp_size", "-1", sizes, "/rm") == "-1"
    assert check.swap("trainer.logger", "console", sizes, "/rm") == ""
    assert check.swap(f"{ARR}.actor.optim.lr", "1e-6", sizes, "/rm") is None


def test_a_scripts_trainer_call_is_recorded_through_bash_and_ray(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "set -eu\nN=${N:-4}\npython3 examples/data_preprocess/gsm8k.py\n"
        'ray job submit --no-wait -- python3 -m recipe.dapo.main_dapo data.train_batch_size=$((N * 2)) "$@"\n'
    )
    launch = catalogue.Launch("x", str(script), "docs", env={"N": "8"}, args=("trainer.nnodes=1",))
    call = check.recorded_call(launch, str(tmp_path), str(tmp_path))
    assert call == ["recipe.dapo.main_dapo", "data.train_batch_size=16", "trainer.nnodes=1"]


def test_a_docs_command_takes_the_overrides_written_under_it(tmp_path):
    page = tmp_path / "docs" / "algo" / "ppo.md"
    page.parent.mkdir(parents=True)
    (tmp_path / "examples" / "ppo_trainer").mkdir(parents=True)
    (tmp_path / "examples" / "ppo_trainer" / "run_gemma.sh").write_text("")
    page.write_text(
        "```bash\nbash run_gemma.sh\n  trainer.n_gpus_per_node=1 \\\n  trainer.logger=console\n```\n"
    )
    (launch,), notes = catalogue.docs(str(tmp_path))
    assert notes == [] and launch.path == "examples/ppo_trainer/run_gemma.sh"
    assert launch.args == ("trainer.n_gpus_per_node=1", "trainer.logger=console")


def test_two_workers_on_one_node_also_where_the_line_leaves_verls_eight_gpus():
    # docs/algo/rollout_corr.md's script sets neither: verl's 8 GPUs per node would need 8 CPUs here
    args = check.tiny_args(["algorithm.adv_estimator=rloo"], "/out", "/rm")
    assert "trainer.n_gpus_per_node=2" in args and "trainer.nnodes=1" in args
    args = check.tiny_args(["trainer.n_gpus_per_node=8", "+trainer.nnodes=4"], "/out", "/rm")
    assert [a for a in args if "n_gpus_per_node" in a or "nnodes" in a] == [
        "trainer.n_gpus_per_node=2",
        "+trainer.nnodes=1",
    ]


def test_a_launch_that_filters_groups_on_acc_gets_the_arith_scorer_that_returns_acc():
    # docs/algo/dapo.md's YAML block 2 filters on `acc`, which verl's DAPO math scorer returns and the
    # swapped-in arithmetic task's scorer did not: the run stopped at step 1 for a missing metric
    import verl_launch_check as launch_check
    import verl_launch_scorer as scorer

    def args_for(*extra):
        cfg = launch_check.composed([], ["algorithm.filter_groups.enable=True", *extra])
        assert cfg is not None
        return launch_check.scorer_args(cfg)

    assert args_for("algorithm.filter_groups.metric=acc") == [
        f"custom_reward_function.path={launch_check.SCORER}",
        "custom_reward_function.name=compute_score",
    ]
    assert args_for("algorithm.filter_groups.metric=seq_reward") == []  # the trainer's own metric
    own = "custom_reward_function.path=/users/own_reward.py"
    assert args_for("algorithm.filter_groups.metric=acc", own) == []  # the launch's own scorer stays
    assert scorer.compute_score("verl_lite/arith", " 12", "12") == {"score": 1.0, "acc": 1.0}
    assert scorer.compute_score("verl_lite/arith", "13", "12") == {"score": 0.0, "acc": 0.0}


def test_a_script_that_needs_a_saved_adapter_gets_the_tiny_models_and_a_jobs_home_loses(tmp_path):
    """verl 0.9's tuning/lora/*from_adapter* stops unless LORA_ADAPTER_PATH is set: the check sets
    one and swaps the path for the tiny model's adapter; a CI job's own HOME (ROCm's) does not win
    over the check's temp folder."""
    script = tmp_path / "run.sh"
    script.write_text(
        "set -eu\nP=${LORA_ADAPTER_PATH:?must set LORA_ADAPTER_PATH}\n"
        "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.lora_adapter_path=$P data.train_files=$HOME/d\n"
    )
    launch = catalogue.Launch("x", str(script), "ci", env={"HOME": "/github/home"})
    (tmp_path / "work").mkdir()
    call = check.recorded_call(launch, str(tmp_path), str(tmp_path / "work"))
    assert call[1:] == [f"{ARR}.model.lora_adapter_path=lora_adapter", f"data.train_files={tmp_path}/work/d"]
    args = check.tiny_args(call[1:2], "/out", "/rm")
    assert f"{ARR}.model.lora_adapter_path=/rm_lora_adapter" in args


def test_a_script_handing_over_to_another_is_recorded_in_the_child(tmp_path):
    """verl 0.9's run_v1_separate_async_ascend.sh ends with `exec bash run_v1_separate_async.sh ...`:
    the child bash inherits the stand-ins, so its trainer call is recorded (was: none)."""
    (tmp_path / "child.sh").write_text('python3 -m verl.trainer.main_ppo "$@"\n')
    script = tmp_path / "run.sh"
    script.write_text(f'exec bash {tmp_path}/child.sh a=1 "$@"\n')
    (tmp_path / "work").mkdir()
    launch = catalogue.Launch("x", str(script), "ci", args=("b=2",))
    assert check.recorded_call(launch, str(tmp_path), str(tmp_path / "work")) == [
        "verl.trainer.main_ppo",
        "a=1",
        "b=2",
    ]
