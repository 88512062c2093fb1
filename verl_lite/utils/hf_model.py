"""Loading local Hugging Face models and tokenizers, with errors that name the config key.

Three kinds of model, by role: the causal LM (actor, ref, rollout), the value model (critic: the
backbone with a scalar head per token) and the scalar reward model.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import logging
import os
import shutil

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer
from transformers.utils import logging as hf_logging

from verl_lite.utils.model_weights import loading_problems
from verl_lite.utils.user_code import exits_as_errors

log = logging.getLogger(__name__)
hf_logging.disable_progress_bar()  # one bar per weight load per worker drowns the training log


def check_model_dir(path: str, key: str = "actor_rollout_ref.model.path") -> None:
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{key}={path!r}: no such folder; point it at a local HF model folder")
    if not os.path.exists(os.path.join(path, "config.json")):
        raise FileNotFoundError(f"{key}={path!r}: no config.json in the folder; is it a HF model folder?")


SHM_ROOT = "/dev/shm/verl_lite"


def model_files(model_cfg) -> str:
    """The folder to load `model_cfg`'s weights from: its path, or with model.use_shm (verl's key)
    a copy in /dev/shm made once per node and reused by every process there (named by the source
    path and its files' sizes and times, so a changed model gets a new copy)."""
    if not getattr(model_cfg, "use_shm", False):
        return model_cfg.path
    src = os.path.abspath(model_cfg.path)
    stats = sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in os.scandir(src) if f.is_file())
    digest = hashlib.sha1(repr((src, stats)).encode()).hexdigest()[:12]
    target = os.path.join(SHM_ROOT, f"{os.path.basename(src)}-{digest}")
    if not os.path.isdir(target):
        tmp = f"{target}.tmp-{os.getpid()}"
        shutil.copytree(src, tmp)
        try:
            os.rename(tmp, target)
        except OSError:  # another process on this node finished its copy first
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _load_config(model_cfg, key: str, **fields):
    check_model_dir(model_cfg.path, f"{key}.path")
    if model_cfg.external_lib:
        with exits_as_errors(  # sys.exit() at import: the run would end with its status, unexplained
            f"{key}.external_lib={model_cfg.external_lib!r}",
            model_cfg.external_lib,
            after=" when imported",
            fix="fix the module or unset the key",
            error=ValueError,
        ):
            try:
                importlib.import_module(model_cfg.external_lib)
            except Exception as e:  # the user's module raising on import: one line, not its traceback
                raise ValueError(
                    f"{key}.external_lib={model_cfg.external_lib!r} fails to import: {type(e).__name__}: "
                    f"{' '.join(str(e).split())[:300]}; fix the module or unset the key"
                ) from e
    config = AutoConfig.from_pretrained(model_cfg.path, trust_remote_code=model_cfg.trust_remote_code)
    for name, value in (model_cfg.override_config or {}).items():
        if name == "attn_implementation":  # not a config field: the loaders' argument (engine/attention.py)
            continue
        if not hasattr(config, name):
            raise ValueError(f"{key}.override_config.{name}: the model config has no such field")
        setattr(config, name, value)
    for name, value in fields.items():
        setattr(config, name, value)
    return config


SCORER_FIELDS = {"num_labels": 1, "classifier_dropout": 0.0}  # a value or reward per token, no dropout


def model_config(model_cfg, key: str, kind: str):
    """The config a role's model is built from (`kind`: causal_lm, value or reward), overrides applied."""
    return _load_config(model_cfg, key, **(SCORER_FIELDS if kind != "causal_lm" else {}))


def model_vocab_size(model_cfg, tokenizer, config=None, key: str = "actor_rollout_ref.model") -> int:
    """The ids the model takes and a rollout engine may sample: its config's vocab_size (vLLM samples
    over it, and Qwen2.5's 151936 pads past its tokenizer's 151665), at least the tokenizer's length.
    `config`: the built model's, when there is one; else read from model_cfg.path."""
    config = config if config is not None else model_config(model_cfg, key, "causal_lm")
    return max(int(getattr(config, "vocab_size", 0) or 0), len(tokenizer))


def _check_loaded(info: dict, model_cfg, key: str, kind: str) -> None:
    """transformers' loading report: a missing, unexpected or reshaped weight is an error, never a
    layer left at its random initialisation (utils/model_weights.py checks safetensors before Ray)."""
    problems = loading_problems(info, f"{key}.path", model_cfg.path, kind)
    if problems:
        raise ValueError(problems[0])


def _from_pretrained(auto_class, model_cfg, config, dtype: torch.dtype, attn_implementation: str):
    """(model, loading info) of `model_cfg`'s files through `auto_class`."""
    return auto_class.from_pretrained(
        model_files(model_cfg),
        config=config,
        dtype=dtype,
        trust_remote_code=model_cfg.trust_remote_code,
        output_loading_info=True,
        attn_implementation=attn_implementation,
    )


def load_causal_lm(
    model_cfg, dtype: torch.dtype, key: str = "actor_rollout_ref.model", attn_implementation: str = "sdpa"
) -> torch.nn.Module:
    """The model of `model_cfg.path` on the host in `dtype`, with the config's overrides applied and
    the attention kernel the caller chose (engine/attention.py)."""
    config = _load_config(model_cfg, key)
    model, info = _from_pretrained(AutoModelForCausalLM, model_cfg, config, dtype, attn_implementation)
    _check_loaded(info, model_cfg, key, "causal_lm")
    return model


def _load_token_scorer(model_cfg, dtype: torch.dtype, key: str, kind: str, attn_implementation: str = "sdpa"):
    """A backbone with a one-output linear head on every position (AutoModelForTokenClassification,
    num_labels=1), plus the checkpoint keys the head did not find. Dropout before the head is set to 0:
    a value or reward must be a deterministic function of the tokens (verl does the same)."""
    config = model_config(model_cfg, key, kind)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the load report lists the new head on every rank; we say it once
    try:
        model, info = _from_pretrained(
            AutoModelForTokenClassification, model_cfg, config, dtype, attn_implementation
        )
    finally:
        hf_logging.set_verbosity(verbosity)
    missing = {k for k in info["missing_keys"] if k.startswith("score.")}
    if kind == "reward" and "score.weight" in missing:
        return model, missing  # load_reward_model says what is wrong with such a folder
    _check_loaded(info, model_cfg, key, kind)
    return model, missing


@torch.no_grad()
def init_value_head(head: torch.nn.Linear, std: float, seed: int = 0) -> None:
    """weight ~ N(0, std^2), bias 0, from a generator of its own: the same head on every rank and in
    every run, whatever the process's random state (transformers would draw from the global RNG)."""
    g = torch.Generator().manual_seed(seed)
    head.weight.copy_(torch.randn(head.weight.shape, generator=g, dtype=torch.float32) * std)
    if head.bias is not None:
        head.bias.zero_()


def load_value_model(
    model_cfg, dtype: torch.dtype, key: str = "critic.model", attn_implementation: str = "sdpa"
) -> torch.nn.Module:
    """The critic: the LM backbone of `model_cfg.path` with a scalar value head per token.

    From a causal-LM folder the LM head is dropped and the head `score` (Linear(hidden, 1) with bias)
    is new, initialised as transformers initialises a classification head, weight ~ N(0,
    initializer_range^2) (0.02 for Qwen2) and bias 0, so initial values are small and centred on 0,
    but from a fixed seed (init_value_head) so every rank and every run starts from the same head.
    From a folder saved by a critic (or any token-classification model) the head is loaded as is.
    """
    model, missing = _load_token_scorer(model_cfg, dtype, key, "value", attn_implementation)
    if missing:
        std = getattr(model.config, "initializer_range", None) or 0.02
        init_value_head(model.score, std)
        log.info("%s.path=%s: new value head initialised N(0, %s^2), bias 0", key, model_cfg.path, std)
    return model


def load_reward_model(
    model_cfg, dtype: torch.dtype, key: str = "reward_model.model", attn_implementation: str = "sdpa"
) -> torch.nn.Module:
    """A scalar reward model saved as AutoModelForSequenceClassification (num_labels=1), loaded with a
    per-token head so the score of any position can be read (the caller takes the last response
    token). The sequence classifier's head has no bias; the bias of the per-token head is set to 0, so
    the per-token score at the last token equals the sequence classifier's pooled score."""
    model, missing = _load_token_scorer(model_cfg, dtype, key, "reward", attn_implementation)
    if "score.weight" in missing:
        raise ValueError(
            f"{key}.path={model_cfg.path!r} has no trained score head (score.weight); point it at a "
            "reward model saved with AutoModelForSequenceClassification(num_labels=1)"
        )
    if model.score.bias is not None:
        with torch.no_grad():
            model.score.bias.zero_()
    return model


MODEL_LOADERS = {"causal_lm": load_causal_lm, "value": load_value_model, "reward": load_reward_model}


def load_tokenizer(path: str, trust_remote_code: bool = False, chat_template: str | None = None):
    """The tokenizer of `path`; `chat_template` (model.custom_chat_template) replaces its template."""
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"tokenizer folder {path!r} does not exist; set data.tokenizer, actor_rollout_ref.model.tokenizer_path "
            "or actor_rollout_ref.model.path"
        )
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


def meta_model(config: transformers.PretrainedConfig, model_cls=None) -> torch.nn.Module:
    """The model `config` describes (its architecture, else a causal LM) on the meta device: names and
    shapes, no memory."""
    arch = (getattr(config, "architectures", None) or [None])[0]
    model_cls = model_cls or (getattr(transformers, arch, None) if arch else None)
    with torch.device("meta"):
        return model_cls(config) if isinstance(model_cls, type) else AutoModelForCausalLM.from_config(config)


def check_weights_fit(model: torch.nn.Module, state_dict: dict, what: str, fix: str) -> None:
    """ValueError "<what>: <the first 3 differences> (and N more); <fix>" when `state_dict` does not
    fit `model`: a tensor of another shape, one the model lacks, or one of the model's the weights
    lack (an lm_head tied to the embeddings excepted: it is re-tied, not stored). A ValueError, as
    utils/ sits below errors.py; a CLI raises it again as its InputError (model_merger.py)."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    differ = [
        f"{k} is {list(v.shape)} in the checkpoint, {list(expected[k])} by the config"
        for k, v in state_dict.items()
        if k in expected and tuple(v.shape) != expected[k]
    ]
    differ += [
        f"the checkpoint has {k}, the config's model does not" for k in state_dict if k not in expected
    ]
    differ += [
        f"the config's model has {k}, the checkpoint does not"
        for k in expected
        if k not in state_dict and not (tied and k.startswith("lm_head."))
    ]
    if differ:
        more = f" (and {len(differ) - 3} more)" if len(differ) > 3 else ""
        raise ValueError(f"{what}: {'; '.join(differ[:3])}{more}; {fix}")


def save_hf_folder(
    target: str,
    config: transformers.PretrainedConfig,
    generation_config=None,
    state_dict=None,
    tokenizer=None,
    model_cls=None,
) -> None:
    """A folder `from_pretrained` loads: config, generation config, tokenizer, and, when `state_dict`
    (full, unsharded tensors) is given, the weights as safetensors.

    `model_cls` (e.g. Qwen2ForCausalLM, or a critic's Qwen2ForTokenClassification) is recorded as
    the config's architecture; without it the config's own is used. The model is built on the meta
    device and the tensors are assigned, so no second copy of the weights is allocated; tied weights
    are re-tied before saving, as from_pretrained would."""
    os.makedirs(target, exist_ok=True)
    config = copy.deepcopy(config)
    if model_cls is not None:
        config.architectures = [model_cls.__name__]
    config.save_pretrained(target)
    if generation_config is not None:
        generation_config.save_pretrained(target)
    if tokenizer is not None:
        tokenizer.save_pretrained(target)
    if state_dict is None:
        return
    model = meta_model(config, model_cls)
    check_weights_fit(model, state_dict, f"the weights saved to {target!r}", "save the model they came from")
    model.load_state_dict(state_dict, strict=False, assign=True)
    model.tie_weights()
    model.save_pretrained(target)
