"""Start-up check that a checkpoint's weights were saved with this run's LoRA setup.

With LoRA a role's model/ holds only the adapters (engine/checkpoint.py), named
`base_model.model.<module>.lora_A.default.weight` (shape [rank, in]) and `...lora_B...`; without it,
the full weights under their HF names. A resume with LoRA switched on or off, another lora_rank, or
target_modules that adapt other linears asks DCP for tensors the checkpoint lacks or holds at
another shape, and fails inside the workers after Ray and every engine have started. This reads
the checkpoint's `.metadata` and the model folder's safetensors headers, so the mismatch is one line
before Ray. Which linears are adapted is compared within the decoder layers (`.layers.N.`), whose
2-D weights are all linears, using PEFT's matching (engine/model_shape.py).
"""

from __future__ import annotations

import os
import re

from verl_lite.engine.checkpoint import MODEL_DIR
from verl_lite.engine.lora import PEFT_PREFIX
from verl_lite.engine.lora_spec import LoraSpec
from verl_lite.engine.model_shape import module_matches
from verl_lite.utils.model_weights import checkpoint_tensors

LORA_A = re.compile(rf"^{re.escape(PEFT_PREFIX)}(.+)\.lora_A\.default\.weight$")
IN_LAYER = re.compile(r"(^|\.)layers\.\d+\.")


def _saved_adapters(folder: str) -> dict[str, int] | None:
    """{adapted module (HF name): rank} from a DCP model folder; None when it cannot be read (the
    completeness and vetting checks name that)."""
    from verl_lite.engine.dcp_safe import read_dcp_metadata

    try:
        items = read_dcp_metadata(folder).state_dict_metadata
    except (OSError, ValueError):
        return None
    found = {}
    for name, item in items.items():
        m = LORA_A.match(name)
        if m and getattr(item, "size", None) is not None:
            found[m.group(1)] = int(item.size[0])
    return found


def _expected(spec: LoraSpec) -> tuple[int | None, object, object]:
    """(rank every adapter has, or None with a rank_pattern; target_modules; exclude_modules)."""
    saved = spec.saved_config()
    rank = saved.get("r", spec.rank) if saved else spec.rank
    pattern = (saved.get("rank_pattern") or {}) if saved else {}
    target, exclude = spec.modules
    return (None if pattern else rank), target, exclude


def _layer_linears(model_path: str) -> list[str] | None:
    """The modules of the model folder's decoder layers that hold a 2-D weight (its linears)."""
    try:
        tensors = checkpoint_tensors(model_path)
    except (OSError, ValueError):
        return None
    if tensors is None:
        return None
    return [
        n.removesuffix(".weight")
        for n, (shape, _, _) in tensors.items()
        if n.endswith(".weight") and len(shape) == 2 and IN_LAYER.search(n)
    ]


def _differences(saved: dict[str, int], spec: LoraSpec | None, model_path: str) -> list[str]:
    section = spec.key if spec else None
    if not saved:
        return (
            []
            if spec is None
            else [f"it was saved without LoRA (full weights); {section}.lora_rank={spec.rank} here"]
        )
    ranks = sorted(set(saved.values()))
    if spec is None:
        return [f"it was saved with LoRA (rank {'/'.join(map(str, ranks))}); LoRA is off here (lora_rank=0)"]
    rank, target, exclude = _expected(spec)
    out = []
    if rank is not None and ranks != [rank]:
        out.append(f"its adapters have rank {'/'.join(map(str, ranks))}, {section}.lora_rank={rank} here")
    linears = _layer_linears(model_path)
    if linears is not None:  # the value head (the critic's, trained in full) is outside the layers
        want = {m for m in linears if module_matches(target, m) and not module_matches(exclude, m)}
        have = {m for m in saved if IN_LAYER.search(m)}
        setting = f"{section}.target_modules={target!r}" + (
            f" with exclude_modules={exclude!r}" if exclude else ""
        )
        if have - want:
            out.append(f"it adapts {_some(have - want)}, which this run's {setting} does not")
        if want - have:
            out.append(f"it has no adapter on {_some(want - have)}, which this run's {setting} adapts")
    return out


def _some(names: set[str]) -> str:
    return ", ".join(sorted(names)[:2]) + (f" (and {len(names) - 2} more)" if len(names) > 2 else "")


def lora_problems(path: str, roles: dict[str, tuple[object, str]], key: str) -> list[str]:
    """`roles`: role -> (its model config section, model kind) for the roles whose weights the resume
    loads. One line per role whose checkpoint was saved with another LoRA setup."""
    problems = []
    for role, (model_cfg, kind) in roles.items():
        saved = _saved_adapters(os.path.join(path, role, MODEL_DIR))
        if saved is None:
            continue
        spec = LoraSpec.of(model_cfg, kind)
        differ = _differences(saved, spec, model_cfg.path)
        if differ:
            problems.append(
                f"{key}: the checkpoint's {role} was saved with another LoRA setup than this run's: "
                f"{'; '.join(differ[:3])}; resume with the LoRA settings it was saved with (lora_rank, "
                "target_modules, exclude_modules), or start afresh (trainer.resume_mode=disable)"
            )
    return problems
