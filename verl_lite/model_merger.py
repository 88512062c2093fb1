"""`python -m verl_lite.model_merger`: a sharded actor checkpoint -> a Hugging Face model folder.

    python -m verl_lite.model_merger --local_dir ckpts/global_step_4/actor --target_dir merged/
    python -m verl_lite.model_merger merge --backend fsdp --local_dir ... --target_dir ...   # verl's form

The checkpoint's model/ folder is torch.distributed.checkpoint (one shard file per rank). It is read
offline, in one process, without Ray or a process group: the full tensors are allocated from the
checkpoint's own metadata (names, shapes, dtypes) and DCP fills them from every rank's shards. The
model is then written with the checkpoint's huggingface/ config, generation config and tokenizer
(or those of --hf_model_path) as safetensors that AutoModelForCausalLM loads, its floating tensors
in bfloat16 as verl 0.9's fsdp merger writes them (whatever dtype the run trained in; verl has no
option to keep fp32, and neither does this). Before anything is
read, the files it reads are checked against the checkpoint's manifest (sizes and SHA-256; a
checkpoint without one is merged unverified, and a line says so), and
`.metadata` is read with the allowlist of engine/dcp_safe.py: a damaged or crafted checkpoint is
refused in one line, exit status 2.

A LoRA checkpoint (one with a lora_adapter/ folder) holds only the adapter: the merger copies it,
in PEFT's format, to <target_dir>/lora_adapter/ and writes the merged model (the base with the
adapter folded in by PEFT's merge) to target_dir. The base weights are read from --hf_model_path,
else from the folder the adapter records (adapter_config.json's base_model_name_or_path).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import warnings

import torch
import transformers
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

from verl_lite.engine.checkpoint import HF_DIR, LORA_DIR, MODEL_DIR
from verl_lite.engine.dcp_safe import read_dcp, read_dcp_metadata
from verl_lite.errors import InputError, one_line
from verl_lite.utils.hf_model import check_weights_fit, meta_model, save_hf_folder
from verl_lite.utils.manifest import MANIFEST, manifest_problems

STEP_DIR = re.compile(r"^global_step_\d+$")  # trainer/checkpoint.py's step folders
# files of a HF folder that describe the model, not the tokenizer
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json")


def load_full_state_dict(model_dir: str) -> dict[str, torch.Tensor]:
    """Every tensor of a DCP checkpoint, unsharded, on the host."""
    if not os.path.exists(os.path.join(model_dir, ".metadata")):
        raise FileNotFoundError(
            f"--local_dir: {model_dir!r} holds no torch.distributed.checkpoint (.metadata missing); "
            "point --local_dir at a global_step_N/actor folder saved with 'model' in checkpoint.save_contents"
        )
    metadata = read_dcp_metadata(model_dir)
    state = {
        key: torch.empty(meta.size, dtype=meta.properties.dtype)
        for key, meta in metadata.state_dict_metadata.items()
        if isinstance(meta, TensorStorageMetadata)
    }
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        read_dcp(state, model_dir, no_dist=True)
    return state


def merged_lora_state_dict(adapter_dir: str, base_path: str | None, config) -> dict[str, torch.Tensor]:
    """The base model's weights with the adapter of `adapter_dir` merged in, as PEFT merges them;
    `config` (the checkpoint's) names the model class (a causal LM, or the critic's value model)."""
    from peft import PeftConfig, PeftModel

    base_path = base_path or PeftConfig.from_pretrained(adapter_dir).base_model_name_or_path
    key = "--hf_model_path" if base_path else "lora_adapter/adapter_config.json's base_model_name_or_path"
    if not base_path or not os.path.exists(os.path.join(base_path, "config.json")):
        raise FileNotFoundError(
            f"{key}: {base_path!r} is not a model folder; a LoRA checkpoint holds only the adapter, so the "
            "merger needs the base model: pass --hf_model_path <the model folder the run trained on>"
        )
    arch = (getattr(config, "architectures", None) or [None])[0]
    model_cls = getattr(transformers, arch, None) if arch else AutoModelForCausalLM
    if not (isinstance(model_cls, type) and issubclass(model_cls, transformers.PreTrainedModel)):
        raise InputError(
            f"the model config (config.json) names the architecture {arch!r}, which is not a transformers model class"
        )
    base = model_cls.from_pretrained(base_path, config=config, dtype="auto")
    model = PeftModel.from_pretrained(base, adapter_dir).merge_and_unload()
    return model.state_dict()


def check_integrity(local_dir: str, read_hf_dir: bool) -> None:
    """The files the merger reads, against the manifest of the checkpoint (global_step_N/manifest.json,
    beside --local_dir): present, of the recorded size and SHA-256 (utils/manifest.py)."""
    step_folder, role = os.path.split(os.path.abspath(local_dir))
    if not os.path.lexists(os.path.join(step_folder, MANIFEST)):
        print(
            f"verl_lite.model_merger: {step_folder!r} has no {MANIFEST}, so the files merged are not verified "
            "(a checkpoint saved before manifests, or copied without it)"
        )  # on stdout: stderr holds only a refusal
        return
    prefixes = [f"{role}/{sub}/" for sub in (MODEL_DIR, LORA_DIR) + ((HF_DIR,) if read_hf_dir else ())]
    wrong = manifest_problems(step_folder, tuple(prefixes))
    if wrong:
        more = f" (and {len(wrong) - 5} more)" if len(wrong) > 5 else ""
        raise InputError(
            f"--local_dir: checkpoint {step_folder!r} is damaged: {'; '.join(wrong[:5])}{more}; "
            "merge another global_step_N folder"
        )


def check_local_dir(local_dir: str) -> None:
    """--local_dir is a role's folder (global_step_N/actor), not the step folder above it."""
    folder = os.path.abspath(local_dir)
    roles = [r for r in ("actor", "critic") if os.path.isdir(os.path.join(folder, r))]
    if STEP_DIR.match(os.path.basename(folder)) or (
        roles and not os.path.isdir(os.path.join(folder, MODEL_DIR))
    ):
        raise InputError(
            f"--local_dir={local_dir!r} is a step folder; point it at the role folder inside it: "
            + " or ".join(repr(os.path.join(local_dir, r)) for r in roles or ["actor"])
        )


def merge(local_dir: str, target_dir: str, hf_model_path: str | None = None) -> str:
    """Write the merged HF folder; returns target_dir."""
    check_local_dir(local_dir)
    check_integrity(local_dir, read_hf_dir=hf_model_path is None)
    source = hf_model_path or os.path.join(local_dir, HF_DIR)
    if not os.path.exists(os.path.join(source, "config.json")):
        key = "--hf_model_path" if hf_model_path else "--local_dir"
        raise FileNotFoundError(
            f"{key}: no config.json in {source!r}; the checkpoint's {HF_DIR}/ folder (written with every "
            "checkpoint) or --hf_model_path must hold the model's config"
        )
    key = "--hf_model_path" if hf_model_path else "--local_dir"
    try:
        config = AutoConfig.from_pretrained(source)
    except Exception as e:  # transformers' validators raise several types
        raise InputError(
            f"{key}: {os.path.join(source, 'config.json')!r} is not a config transformers loads: "
            f"{type(e).__name__}: {one_line(str(e))[:300]}; pass the model folder the run trained on"
        ) from e
    lora_dir = os.path.join(local_dir, LORA_DIR)
    if os.path.isdir(lora_dir):
        state = merged_lora_state_dict(lora_dir, hf_model_path, config)
        shutil.copytree(lora_dir, os.path.join(target_dir, LORA_DIR), dirs_exist_ok=True)
    else:
        state = load_full_state_dict(os.path.join(local_dir, MODEL_DIR))
    for name, tensor in state.items():  # verl's dtype; one tensor at a time, each fp32 copy freed as it goes
        if tensor.is_floating_point():
            state[name] = tensor.to(torch.bfloat16)
    try:  # before anything is written; else save_hf_folder's refusal in a half-written folder
        check_weights_fit(
            meta_model(config),
            state,
            f"{key}: {os.path.join(source, 'config.json')!r} describes a model of another shape than the "
            "checkpoint's weights",
            "pass the model folder the run trained on",
        )
    except ValueError as e:
        raise InputError(str(e)) from None
    try:
        generation_config = GenerationConfig.from_pretrained(source)
    except OSError:  # a model folder without generation_config.json
        generation_config = None
    save_hf_folder(target_dir, config, generation_config, state)
    for name in sorted(os.listdir(source)):  # the tokenizer files, as they were saved
        path = os.path.join(source, name)
        if os.path.isfile(path) and name not in MODEL_FILES and not name.endswith(".safetensors"):
            shutil.copy2(path, os.path.join(target_dir, name))
    return target_dir


def parse_args(argv: list[str]) -> argparse.Namespace:
    if argv and argv[0] == "merge":  # verl's `model_merger merge --backend fsdp ...`
        argv = argv[1:]
    parser = argparse.ArgumentParser(
        prog="python -m verl_lite.model_merger",
        description="Merge a sharded verl_lite checkpoint (global_step_N/actor) into a HF model folder.",
    )
    parser.add_argument("--backend", default="fsdp", help="checkpoint format; only fsdp (FSDP2 + DCP)")
    parser.add_argument("--local_dir", required=True, help="the global_step_N/actor folder")
    parser.add_argument("--target_dir", required=True, help="where to write the HF model folder")
    parser.add_argument(
        "--hf_model_path",
        default=None,
        help="take config and tokenizer from this folder (LoRA checkpoints: also the base weights)",
    )
    args = parser.parse_args(argv)
    if args.backend != "fsdp":
        parser.error(f"--backend={args.backend!r}: verl_lite checkpoints are FSDP2 only; use --backend fsdp")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        target = merge(args.local_dir, args.target_dir, args.hf_model_path)
    except (OSError, InputError) as e:  # a refused or damaged checkpoint, a folder it cannot write
        print(f"verl_lite.model_merger: {one_line(str(e))}", file=sys.stderr)
        sys.exit(2)
    print(f"merged {args.local_dir} -> {target}")


if __name__ == "__main__":
    main()
