"""What scripts/bench_vs_trl.py prepares and measures besides the runs themselves: the model
folders, the held-out prompts, TRL's virtual env, the accuracy evaluation and the machine's load.

Models: `tiny` is the embedded warm-started model (verl_lite://tiny-qwen2-arith); `tiny-random` the
same architecture randomly initialised; `20m` a random Qwen2 of ~21M parameters (hidden 512, 7
layers, head size 64, the tiny tokenizer). The accuracy is greedy decoding of the first 200 prompts
of the held-out arithmetic split, scored by the task's rule, with HF `generate` in this process:
the same code for both sides' final weights.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

TRL_VERSION = "1.16.0"
EVAL_PROMPTS = 200
# random-init Qwen2 shapes (the tiny tokenizer); 21m is issue 25's independent measurement's geometry
RANDOM_SHAPES = {
    "20m": dict(
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=7,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=256,
    ),
    "21m": dict(
        hidden_size=640,
        intermediate_size=1920,
        num_hidden_layers=4,
        num_attention_heads=10,
        num_key_value_heads=10,
        max_position_embeddings=128,
    ),
}
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)


def _random_model(config, source: str, path: str, seed: int = 0) -> str:
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    if os.path.exists(os.path.join(path, "config.json")):
        return path
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    for name in TOKENIZER_FILES + ("generation_config.json",):
        if os.path.exists(os.path.join(source, name)):
            shutil.copy(os.path.join(source, name), os.path.join(path, name))
    return path


def build_model_dir(name: str, root: str) -> tuple[str, int]:
    """(folder, parameter count) of model `name`."""
    from transformers import AutoConfig, Qwen2Config

    from verl_lite.data import assets

    tiny = assets.resolve("verl_lite://tiny-qwen2-arith")
    if name == "tiny":
        path = tiny
    elif name == "tiny-random":
        path = _random_model(AutoConfig.from_pretrained(tiny), tiny, os.path.join(root, name))
    elif name in RANDOM_SHAPES:
        base = AutoConfig.from_pretrained(tiny)
        config = Qwen2Config(
            vocab_size=base.vocab_size,
            tie_word_embeddings=True,
            eos_token_id=base.eos_token_id,
            pad_token_id=base.pad_token_id,
            **RANDOM_SHAPES[name],
        )
        path = _random_model(config, tiny, os.path.join(root, name))
    else:
        raise ValueError(f"unknown model {name!r}")
    return path, _num_params(path)


def _num_params(path: str) -> int:
    """Parameters stored in the folder (a tied head is stored, and counted, once)."""
    from safetensors import safe_open

    total = 0
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
        for key in f.keys():
            count = 1
            for dim in f.get_slice(key).get_shape():
                count *= dim
            total += count
    return total


def write_eval_set(path: str) -> str:
    """The first EVAL_PROMPTS rows of the held-out arithmetic split, as a parquet file."""
    import pandas as pd

    from verl_lite.data import assets

    frame = pd.read_parquet(assets.resolve("verl_lite://arith/test.parquet")).head(EVAL_PROMPTS)
    frame.to_parquet(path)
    return path


def evaluate_accuracy(model_dir: str, tokenizer_dir: str, eval_file: str, max_new_tokens: int) -> float:
    """Greedy accuracy of `model_dir` on the prompts of `eval_file` (one batch, left-padded)."""
    import pandas as pd
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, GenerationConfig

    from verl_lite.reward.scorers import default_compute_score
    from verl_lite.utils.hf_model import load_tokenizer

    torch.set_num_threads(1)
    transformers.utils.logging.disable_progress_bar()
    tokenizer = load_tokenizer(tokenizer_dir)
    frame = pd.read_parquet(eval_file)
    texts = [
        tokenizer.apply_chat_template(
            [dict(m) for m in row.prompt], add_generation_prompt=True, tokenize=False
        )
        for row in frame.itertuples()
    ]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    width = max(len(x) for x in ids)
    input_ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(x)) + x for x in ids])
    mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    config = GenerationConfig(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.no_grad():
        out = model.generate(input_ids=input_ids, attention_mask=mask, generation_config=config)
    answers = tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
    scores = [
        default_compute_score(row.data_source, answer, str(row.reward_model["ground_truth"]))
        for row, answer in zip(frame.itertuples(), answers)
    ]
    return sum(scores) / len(scores)


def ensure_trl_python(cache_dir: str) -> str:
    """The python of a virtual env with TRL, built on first use. torch==2.13.0 goes in the same pip
    command as trl (installed alone, a dependency would pull a multi-GB CUDA build); transformers is
    pinned to this env's version, so both sides run the same model code."""
    import transformers

    venv = os.path.join(cache_dir, "bench_trl", f"trl-{TRL_VERSION}-transformers-{transformers.__version__}")
    python = os.path.join(venv, "bin", "python")
    stamp = os.path.join(venv, ".installed")
    if os.path.exists(stamp):
        return python
    print(f"building TRL's virtual env in {venv} (once; a few minutes)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
    packages = [
        "torch==2.13.0",
        f"trl=={TRL_VERSION}",
        f"transformers=={transformers.__version__}",
        "pandas",
        "pyarrow",
    ]
    subprocess.run([python, "-m", "pip", "install", "-q", *packages], check=True)
    open(stamp, "w").close()
    return python


def machine_line() -> str:
    cpu = "unknown CPU"
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    load = os.getloadavg()
    return f"{cpu}, {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
