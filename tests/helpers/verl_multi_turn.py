"""verl's two multi-turn GSM8K tool scripts (examples/sglang_multiturn/ at b178a3c), as their trainer
calls: the arguments bash passes to `python3 -m verl.trainer.main_ppo` (recorded the way
scripts/verl_launch_check.py records them; `{verl}` is the script's $PROJECT_DIR, a verl checkout,
`{home}` its $HOME, and run_qwen2.5-3b_gsm8k_multiturn_vllm_fsdp.sh's `${use_kl_loss}`, a variable
its user sets, is True as two lines earlier), with their config folder's files as shipped.

`tiny_call` swaps what the issue allows: the model path, sizes (prompts per step, lengths, samples
per prompt, mini/micro-batches, two CPU workers, two steps, vLLM's CPU KV cache), the output
folders, rollout.name=vllm for SGLang, console logging for mlflow (not installed here), no rollout
trace (rollout.trace.backend=null: verl_lite refuses the mlflow script's trace by name), and
`data.tool_config_path=null`: the tiny model was warm-started on prompts that list no tools (with
the tool list each prompt is ~790 tokens, minutes of warm start on 2 CPUs). Everything else,
including the tool YAML and the config file the scripts name, is verl's.
"""

from __future__ import annotations

import random
from pathlib import Path

from tests.helpers.agent import VERL_GSM8K_TOOL_CONFIG, write_yaml
from tests.helpers.tool_model import gsm8k_tool_trace, make_tool_model_dir

ARR = "actor_rollout_ref"
CONFIG = "{verl}/examples/sglang_multiturn/config"
TOOLS = f"{ARR}.rollout.multi_turn.tool_config_path={CONFIG}/tool_config/gsm8k_tool_config.yaml"

# examples/sglang_multiturn/config/gsm8k_multiturn_grpo.yaml, as shipped
VERL_GSM8K_MULTITURN_GRPO = """\
hydra:
  searchpath:
    - file://verl/trainer/config

defaults:
  - ppo_trainer
  - _self_

data:
  max_prompt_length: 1024
  max_response_length: 1024
  train_batch_size: 256
  return_raw_chat: True

actor_rollout_ref:
  hybrid_engine: True
  rollout:
    name: sglang
    multi_turn:
      enable: True
      max_assistant_turns: 5
"""

VLLM_FSDP = [
    f"--config-path={CONFIG}",
    "--config-name=gsm8k_multiturn_grpo",
    f"{ARR}.rollout.name=vllm",
    "algorithm.adv_estimator=grpo",
    "data.train_batch_size=32",
    "data.max_prompt_length=1024",
    "data.max_response_length=1024",
    "data.filter_overlong_prompts=True",
    "data.truncation=error",
    "data.return_raw_chat=True",
    f"{ARR}.model.path=Qwen/Qwen2.5-3B-Instruct",
    f"{ARR}.actor.optim.lr=1e-6",
    f"{ARR}.actor.ppo_mini_batch_size=32",
    f"{ARR}.actor.ppo_micro_batch_size_per_gpu=8",
    f"{ARR}.actor.use_kl_loss=True",
    f"{ARR}.actor.kl_loss_coef=0.001",
    f"{ARR}.actor.kl_loss_type=low_var_kl",
    f"{ARR}.actor.entropy_coeff=0",
    f"{ARR}.actor.use_kl_loss=True",
    f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu=8",
    f"{ARR}.rollout.tensor_model_parallel_size=2",
    f"{ARR}.rollout.n=8",
    f"{ARR}.rollout.gpu_memory_utilization=0.9",
    f"{ARR}.ref.log_prob_micro_batch_size_per_gpu=8",
    "algorithm.use_kl_in_reward=False",
    "trainer.critic_warmup=0",
    "trainer.project_name=gsm8k_async_rl",
    "trainer.experiment_name=qwen2.5-3b_function_rm-gsm8k-sgl-multi-w-tool-verify-n16",
    "trainer.n_gpus_per_node=16",
    "trainer.nnodes=1",
    "trainer.save_freq=-1",
    "trainer.test_freq=20",
    'trainer.logger=["console"]',
    "data.train_files={home}/data/gsm8k/train.parquet",
    "data.val_files={home}/data/gsm8k/test.parquet",
    "trainer.total_epochs=15",
    f"{ARR}.rollout.trace.token2text=False",
    f"{ARR}.rollout.mode=async",
    f"{ARR}.rollout.multi_turn.enable=true",
    f"{ARR}.rollout.enforce_eager=True",
    f"{ARR}.actor.use_torch_compile=False",
    TOOLS,
    f"{ARR}.rollout.free_cache_engine=True",
]

TOOL_AGENT_MLFLOW = [
    f"--config-path={CONFIG}",
    "--config-name=gsm8k_multiturn_grpo",
    "algorithm.adv_estimator=grpo",
    "data.train_batch_size=256",
    "data.max_prompt_length=1024",
    "data.max_response_length=1024",
    "data.filter_overlong_prompts=True",
    "data.truncation=error",
    "data.return_raw_chat=True",
    f"{ARR}.model.path=Qwen/Qwen2.5-3B-Instruct",
    f"{ARR}.actor.optim.lr=1e-6",
    f"{ARR}.model.use_remove_padding=True",
    f"{ARR}.actor.ppo_mini_batch_size=256",
    f"{ARR}.actor.ppo_micro_batch_size_per_gpu=32",
    f"{ARR}.actor.use_kl_loss=True",
    f"{ARR}.actor.kl_loss_coef=0.001",
    f"{ARR}.actor.kl_loss_type=low_var_kl",
    f"{ARR}.actor.entropy_coeff=0",
    f"{ARR}.model.enable_gradient_checkpointing=True",
    f"{ARR}.actor.fsdp_config.param_offload=False",
    f"{ARR}.actor.fsdp_config.optimizer_offload=False",
    f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu=32",
    f"{ARR}.rollout.tensor_model_parallel_size=2",
    f"{ARR}.rollout.name=sglang",
    f"{ARR}.rollout.mode=async",
    f"{ARR}.rollout.gpu_memory_utilization=0.5",
    f"{ARR}.rollout.n=16",
    f"{ARR}.ref.log_prob_micro_batch_size_per_gpu=32",
    f"{ARR}.ref.fsdp_config.param_offload=True",
    f"{ARR}.rollout.trace.backend=mlflow",
    f"{ARR}.rollout.trace.token2text=True",
    "algorithm.use_kl_in_reward=False",
    "trainer.critic_warmup=0",
    'trainer.logger=["console","mlflow"]',
    "trainer.project_name=gsm8k_tool-agent",
    "trainer.experiment_name=qwen2.5-3b_function_rm-gsm8k-sgl-tool-agent-verify-n16",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=1",
    "trainer.save_freq=-1",
    "trainer.test_freq=20",
    "trainer.total_training_steps=2",
    "data.train_files={home}/data/gsm8k/train.parquet",
    "data.val_files={home}/data/gsm8k/test.parquet",
    TOOLS,
    "trainer.total_epochs=15",
]

SCRIPTS = {
    "run_qwen2.5-3b_gsm8k_multiturn_vllm_fsdp.sh": VLLM_FSDP,
    "run_qwen2.5-3b_gsm8k_tool_agent_mlflow.sh": TOOL_AGENT_MLFLOW,
}


def write_verl_tree(root: Path) -> None:
    """The scripts' config folder under root (their $PROJECT_DIR), files as shipped."""
    config = Path(CONFIG.format(verl=root))
    (config / "tool_config").mkdir(parents=True, exist_ok=True)
    write_yaml(config / "gsm8k_multiturn_grpo.yaml", VERL_GSM8K_MULTITURN_GRPO)
    write_yaml(config / "tool_config" / "gsm8k_tool_config.yaml", VERL_GSM8K_TOOL_CONFIG)


SIZES = {
    "data.train_batch_size": "8",
    "data.max_prompt_length": "24",
    "data.max_response_length": "200",
    f"{ARR}.actor.ppo_mini_batch_size": "4",
    f"{ARR}.rollout.n": "4",
    f"{ARR}.rollout.name": "vllm",
    "trainer.n_gpus_per_node": "2",
    "trainer.logger": "[console,file]",
    f"{ARR}.rollout.trace.backend": "null",  # verl_lite refuses rollout tracing by name
}
MICRO = ("ppo_micro_batch_size_per_gpu", "log_prob_micro_batch_size_per_gpu")


def tiny_call(args: list[str], verl: Path, home: Path, model: str, out: Path) -> list[str]:
    """The script's call with the swaps of the module docstring; the data stays at the script's
    $HOME/data/gsm8k/{train,test}.parquet (write tool-agent rows there)."""
    call = []
    for arg in args:
        arg = arg.format(verl=verl, home=home)
        key, _, value = arg.partition("=")
        if key == f"{ARR}.model.path":
            value = model
        elif key in SIZES:
            value = SIZES[key]
        elif key.endswith(MICRO):
            value = "8"
        elif key == "trainer.total_training_steps":
            continue  # set below
        call.append(f"{key}={value}")
    return [
        *call,
        "data.tool_config_path=null",
        f"{ARR}.rollout.cpu_kv_cache_gb=0.25",
        "trainer.total_training_steps=2",
        f"trainer.default_local_dir={out}",
        f"hydra.run.dir={out}",
    ]


def question(a: int, b: int) -> list[dict]:
    return [{"role": "user", "content": f"{a}+{b}="}]


_rng = random.Random(0)
# the model's 200 warm-start pairs, then the runs' 32 train and 8 test prompts
PAIRS = [(_rng.randrange(50), _rng.randrange(50)) for _ in range(240)]


def tiny_model_dir(path: str) -> str:
    """The tiny model the scripts run (make_tool_model_dir: cached), warm-started on GSM8K tool traces of the first 200 pairs. 800 steps: at 400 the model's calls were
    well formed on one CPU and mostly malformed on another (27 of 32, an Intel Xeon with AMX), the
    training's float rounding differing between them."""
    traces = [gsm8k_tool_trace(question(a, b), str(a + b)) for a, b in PAIRS[:200]]
    return make_tool_model_dir(path, traces, steps=800, lr=1e-2)
