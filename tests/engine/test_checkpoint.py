"""Engine checkpoints on 2 gloo ranks: save, load into fresh engines in every offload mode, train on.

The source engine keeps its state on the host (offload_policy) and saves after one update; fresh
engines in each offload mode load that checkpoint and take the same second update. Their weights
must equal the source's after its own second update, which only holds if params, Adam moments,
step counts and the lr schedule all came back. The HF export must give the logits of the weights
the engine held when it saved, and the offline model merger their bf16 rounding (verl's dtype). A NaN in the loss skips the step.
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh
from transformers import AutoModelForCausalLM

from tests.helpers.bad_inputs import (
    METADATA_PAYLOADS,
    _Runs,
    payload_ran,
    pickle_globals,
    register_payload_extension,
)
from tests.helpers.configs import fp32_fsdp, tiny_actor, tiny_model
from tests.helpers.dist import run_ranks
from tests.helpers.merged import assert_bf16_of
from tests.helpers.models import make_ppo_batch
from verl_lite import model_merger
from verl_lite.config.schema import OptimConfig
from verl_lite.engine.checkpoint import load_engine, save_engine, write_failure
from verl_lite.engine.dcp_safe import ALLOWED
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.model_merger import merge
from verl_lite.trainer import checkpoint as ckpt
from verl_lite.utils.manifest import write_manifest
from verl_lite.workers.actor import PPOActor

MODES = {
    "none": {},
    "param_opt_offload": {"param_offload": True, "optimizer_offload": True},
    "offload_policy": {"offload_policy": True},
}
ROWS = 8


def _build(model_dir, mesh, fsdp_over):
    cfg = tiny_actor(grad_clip=1.0)
    cfg.clip_ratio_low = cfg.clip_ratio_high = 0.2
    cfg.optim = OptimConfig(lr=1e-2, weight_decay=0.01, total_training_steps=4, lr_scheduler_type="cosine")
    engine = FSDPEngine(
        tiny_model(model_dir),
        fp32_fsdp(**fsdp_over),
        mesh,
        role="actor",
        optim_cfg=cfg.optim,
        grad_clip=1.0,
    )
    return engine, PPOActor(engine, cfg, response_length=5, temperature=1.0)


def _full(engine) -> dict[str, torch.Tensor]:
    return {n: t.clone() for n, t in engine.iter_full_params()}


def _max_diff(a, b) -> float:
    return max((a[n] - b[n]).abs().max().item() for n in a)


def _save_load_train(rank, world, model_dir, path):
    mesh = init_device_mesh("cpu", (world,))
    batches = [make_ppo_batch(vocab=110, bs=ROWS, seed=20 + s) for s in range(2)]
    rows = ROWS // world
    local = [{k: v[rank * rows : (rank + 1) * rows] for k, v in b.items()} for b in batches]

    source, actor = _build(model_dir, mesh, MODES["offload_policy"])
    actor.update(local[0], mini_size=rows // 2, micro_size=2)  # two optimizer steps
    at_save = _full(source)
    torch.manual_seed(100 + rank)
    save_engine(source, path, ["model", "optimizer", "extra", "hf_model"], extra={"rank": rank})
    draws_after_save = torch.rand(4)
    actor.update(local[1], mini_size=rows // 2, micro_size=2)
    want = _full(source)

    out = {"at_save": at_save, "moved": _max_diff(want, at_save), "diff": {}}
    for mode, fsdp_over in MODES.items():
        engine, resumed = _build(model_dir, mesh, fsdp_over)
        extra = load_engine(engine, path, ["model", "optimizer", "extra"])
        assert extra == {"rank": rank}
        assert torch.equal(torch.rand(4), draws_after_save), "the torch RNG state comes back"
        assert engine.lr_scheduler.state_dict() == _lr_after_first(source)
        resumed.update(local[1], mini_size=rows // 2, micro_size=2)
        out["diff"][mode] = _max_diff(_full(engine), want)
    return out


def _lr_after_first(source):
    """The source's scheduler as it was at save time: one training step behind now."""
    state = dict(source.lr_scheduler.state_dict())
    state["last_epoch"] -= 1
    state["_step_count"] -= 1
    lr = source.lr_scheduler.lr_lambdas[0](state["last_epoch"]) * state["base_lrs"][0]
    state["_last_lr"] = [lr]
    return state


@pytest.fixture(scope="module")
def saved(tiny_model_dir, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("engine_ckpt") / "actor")
    results = run_ranks(_save_load_train, 2, tiny_model_dir, path)
    return path, results


def test_resumed_engines_in_every_offload_mode_train_on_identically(saved):
    _, results = saved
    for r in results:
        assert r["moved"] > 1e-4, "the second update must change the weights for the check to mean anything"
        for mode, diff in r["diff"].items():
            assert diff < 1e-6, f"{mode}: weights differ by {diff} from the uninterrupted engine"


def _logits(model_dir_or_model, ids):
    model = (
        AutoModelForCausalLM.from_pretrained(model_dir_or_model, dtype=torch.float32)
        if isinstance(model_dir_or_model, str)
        else model_dir_or_model
    )
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_hf_export_and_model_merger_give_the_engines_logits(saved, tiny_model_dir, tmp_path):
    path, results = saved
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    reference.load_state_dict(results[0]["at_save"], strict=False)  # lm_head is tied to the embedding
    ids = torch.randint(3, 110, (3, 12), generator=torch.Generator().manual_seed(0))
    want = _logits(reference, ids)
    merged = merge(path, str(tmp_path / "merged"))
    diff = (_logits(f"{path}/huggingface", ids) - want).abs().max().item()
    assert diff < 1e-5, f"the HF export's logits differ by {diff}"
    assert_bf16_of(merged, reference)  # verl's merger writes bf16
    exact = {n: t.bfloat16().float() for n, t in reference.state_dict().items()}
    reference.load_state_dict(exact)
    diff = (_logits(merged, ids) - _logits(reference, ids)).abs().max().item()
    assert diff < 1e-5, f"the merger's logits differ by {diff} from the bf16 weights'"
    base = _logits(tiny_model_dir, ids)
    assert (base - want).abs().max() > 1e-3, "trained weights must differ from the initial ones"


def test_the_model_merger_names_a_step_folder_and_a_config_of_another_shape(saved, tmp_path, capsys):
    """Two mistakes that gave a traceback or an unclear line: --local_dir at the step folder instead of
        its actor folder, and --hf_model_path whose config describes a model of another shape (wider, or
    with a layer the checkpoint lacks)."""
    path, _ = saved
    step = tmp_path / "global_step_4"
    shutil.copytree(path, step / "actor")
    other = tmp_path / "other_model"
    shutil.copytree(f"{path}/huggingface", other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(config | {"hidden_size": 2 * config["hidden_size"]}))
    deeper = tmp_path / "deeper_model"  # a layer more than the checkpoint: keys it lacks
    shutil.copytree(f"{path}/huggingface", deeper)
    layers = config["num_hidden_layers"]
    deeper_config = {k: v for k, v in config.items() if k != "layer_types"} | {
        "num_hidden_layers": layers + 1
    }
    (deeper / "config.json").write_text(json.dumps(deeper_config))
    invalid = tmp_path / "invalid_model"  # layer_types no longer matches: transformers refuses the config
    shutil.copytree(f"{path}/huggingface", invalid)
    (invalid / "config.json").write_text(json.dumps(config | {"num_hidden_layers": layers + 1}))
    runs = {
        "step": ["--local_dir", str(step)],
        "invalid": ["--local_dir", str(step / "actor"), "--hf_model_path", str(invalid)],
        "shape": ["--local_dir", str(step / "actor"), "--hf_model_path", str(other)],
        "layers": ["--local_dir", str(step / "actor"), "--hf_model_path", str(deeper)],
    }
    said = {}
    for name, args in runs.items():
        with pytest.raises(SystemExit) as info:
            model_merger.main([*args, "--target_dir", str(tmp_path / f"merged_{name}")])
        err = capsys.readouterr().err.strip()
        assert info.value.code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
        said[name] = err
        assert not (tmp_path / f"merged_{name}").exists()
    assert said["step"] == (
        f"verl_lite.model_merger: --local_dir='{step}' is a step folder; point it at the role folder inside "
        f"it: '{step}/actor'"
    )
    assert said["shape"].startswith(
        f"verl_lite.model_merger: --hf_model_path: '{other}/config.json' describes a model of another shape "
        "than the checkpoint's weights: "
    ), said["shape"]
    assert f"in the checkpoint, [{2 * config['hidden_size']}] by the config" in said["shape"], said["shape"]
    assert said["layers"].startswith(
        f"verl_lite.model_merger: --hf_model_path: '{deeper}/config.json' describes a model of another shape "
        f"than the checkpoint's weights: the config's model has model.layers.{layers}."
    ), said["layers"]
    assert ", the checkpoint does not" in said["layers"], said["layers"]
    assert said["invalid"].startswith(
        f"verl_lite.model_merger: --hf_model_path: '{invalid}/config.json' is not a config transformers loads: "
    ), said["invalid"]


def _in_buffers(tensor, buffers) -> bool:
    ptr = tensor.data_ptr()
    return any(b.data.data_ptr() <= ptr < b.data.data_ptr() + b.nbytes for b in buffers)


def _resume_under_optimizer_offload(rank, world, model_dir, path):
    """Save mid-run and resume, both with params and optimizer offloaded; count optimizer steps
    and find where the loaded state lives."""
    mesh = init_device_mesh("cpu", (world,))
    mode = MODES["param_opt_offload"]
    batches = [make_ppo_batch(vocab=110, bs=ROWS, seed=40 + s) for s in range(2)]
    rows = ROWS // world
    local = [{k: v[rank * rows : (rank + 1) * rows] for k, v in b.items()} for b in batches]
    source, actor = _build(model_dir, mesh, mode)
    actor.update(local[0], mini_size=rows // 2, micro_size=2)
    save_engine(source, path, ["model", "optimizer", "extra"])
    actor.update(local[1], mini_size=rows // 2, micro_size=2)
    want = _full(source)

    engine, resumed = _build(model_dir, mesh, mode)
    steps = []
    engine.optimizer.register_step_pre_hook(lambda *args: steps.append(1))
    load_engine(engine, path, ["model", "optimizer", "extra"])
    steps_in_load = len(steps)
    homes = list(engine.offload.optim_homes.values())
    state = [v.to_local() for s in engine.optimizer.state.values() for v in s.values() if v.dim() > 0]
    placed = all(_in_buffers(t, homes) for t in state)
    resumed.update(local[1], mini_size=rows // 2, micro_size=2)
    got = _full(engine)
    same = all(torch.equal(got[n], want[n]) for n in want)
    return steps_in_load, len(state), placed, same


def test_resume_under_optimizer_offload_makes_the_state_on_the_host_and_is_bit_exact(
    tiny_model_dir, tmp_path
):
    for steps, num_state, placed, same in run_ranks(
        _resume_under_optimizer_offload, 2, tiny_model_dir, str(tmp_path / "actor")
    ):
        assert steps == 0, "loading must not run an optimizer step (torch's zero-lr step runs on the device)"
        assert num_state > 0 and placed, "the loaded moments live in the offload's host buffers"
        assert same, "the resumed run must train on bit for bit"


def _nan_loss_step(rank, world, model_dir):
    mesh = init_device_mesh("cpu", (world,))
    engine, actor = _build(model_dir, mesh, {})
    rows = ROWS // world
    batch = make_ppo_batch(vocab=110, bs=ROWS, seed=5)
    local = {k: v[rank * rows : (rank + 1) * rows] for k, v in batch.items()}
    actor.update(local, mini_size=rows, micro_size=2)  # a normal step: Adam state exists
    engine.pop_metrics()
    before = _full(engine)
    moments = {id(p): s["exp_avg"].to_local().clone() for p, s in engine.optimizer.state.items()}
    if rank == 1:  # a NaN on one rank poisons the reduced gradient on all of them
        local["advantages"][0, 0] = float("nan")
    metrics = actor.update(local, mini_size=rows, micro_size=2)
    report, _ = engine.pop_metrics()
    unchanged = _max_diff(_full(engine), before)
    moments_same = all(
        torch.equal(s["exp_avg"].to_local(), moments[id(p)]) for p, s in engine.optimizer.state.items()
    )
    actor.update({k: v for k, v in local.items()} | {"advantages": batch["advantages"][:rows]}, rows, 2)
    recovered = _max_diff(_full(engine), before)
    return metrics, report, unchanged, moments_same, recovered


def test_nan_loss_skips_the_optimizer_step_and_is_counted(tiny_model_dir):
    for metrics, report, unchanged, moments_same, recovered in run_ranks(_nan_loss_step, 2, tiny_model_dir):
        assert math.isnan(metrics["actor/pg_loss"]) and math.isnan(metrics["actor/grad_norm"])
        assert report["actor/nonfinite_grad_skips"] == 1
        assert unchanged == 0.0 and moments_same, "a skipped step leaves weights and Adam moments alone"
        assert recovered > 1e-4, "the next finite step trains again"


def test_the_engine_checkpoint_metadata_names_only_allowed_globals(saved):
    """What DCP writes for the engine's model and optimizer (DTensor shards, AdamW state and
    hyper-parameters), walked opcode by opcode: the allowlist admits all of it, and only that."""
    path, _ = saved
    for sub in ("model", "optimizer"):
        named = pickle_globals((Path(path) / sub / ".metadata").read_bytes())
        assert ("torch.distributed.checkpoint.metadata", "Metadata") in named
        assert named <= ALLOWED, f"{sub}: {named - ALLOWED}"


@pytest.fixture
def hostile_copy(saved, tmp_path):
    copy = tmp_path / "actor"
    shutil.copytree(saved[0], copy)
    register_payload_extension()
    yield copy
    if hasattr(os, "VERL_LITE_PICKLE_RAN"):
        del os.VERL_LITE_PICKLE_RAN


@pytest.mark.parametrize("kind", sorted(METADATA_PAYLOADS))
def test_the_model_merger_refuses_a_crafted_metadata_in_one_line(kind, hostile_copy, tmp_path, capsys):
    marker = tmp_path / "RAN"
    (hostile_copy / "model" / ".metadata").write_bytes(METADATA_PAYLOADS[kind](marker))
    with pytest.raises(SystemExit) as info:
        model_merger.main(["--local_dir", str(hostile_copy), "--target_dir", str(tmp_path / "merged")])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"verl_lite.model_merger: refusing to load {hostile_copy}/model/.metadata"), err
    assert not payload_ran(marker), f"the {kind} payload ran in the model merger"
    assert not (tmp_path / "merged" / "model.safetensors").exists()


def test_the_model_merger_process_refuses_a_crafted_metadata(hostile_copy, tmp_path):
    """The real `python -m verl_lite.model_merger`: exit 2, one line, the payload never ran."""
    marker = tmp_path / "RAN"
    (hostile_copy / "model" / ".metadata").write_bytes(METADATA_PAYLOADS["dotted_via_dcp_filesystem"](marker))
    cmd = [sys.executable, "-m", "verl_lite.model_merger", "merge", "--backend", "fsdp"]
    cmd += ["--local_dir", str(hostile_copy), "--target_dir", str(tmp_path / "merged")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "dotted name torch.distributed.checkpoint.filesystem.os.system" in proc.stderr
    assert not marker.exists()


def test_the_model_merger_refuses_a_shard_changed_since_it_was_saved(saved, tmp_path, capsys):
    """4 KB zeroed inside a shard keeps its size; the manifest's SHA-256 names the file."""
    step = tmp_path / "global_step_4"
    shutil.copytree(saved[0], step / "actor")
    write_manifest(str(step))
    model_merger.check_integrity(str(step / "actor"), read_hf_dir=True)  # as saved: it passes
    shard = step / "actor" / "model" / "__1_0.distcp"
    size = shard.stat().st_size
    with open(shard, "r+b") as f:
        f.seek(size // 2 - 2048)
        f.write(bytes(4096))
    with pytest.raises(SystemExit) as info:
        model_merger.main(["--local_dir", str(step / "actor"), "--target_dir", str(tmp_path / "merged")])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and len(err.splitlines()) == 1, err
    assert (
        f"--local_dir: checkpoint '{step}' is damaged: actor/model/__1_0.distcp has changed since it was saved"
        in err
    )
    assert not (tmp_path / "merged").exists()


def test_a_crafted_trainer_state_is_refused_without_running_its_code(saved, tmp_path):
    copy = tmp_path / "ckpt"
    copy.mkdir()
    marker = tmp_path / "pwned"
    (copy / "data.pt").write_bytes(_torch_file_with(_Runs(str(marker))))
    with pytest.raises(pickle.UnpicklingError):
        ckpt.read_trainer_state(str(copy))
    assert not marker.exists()


def _torch_file_with(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save({"global_step": 1, "sampler": obj}, buffer)
    return buffer.getvalue()


def test_a_write_failure_is_found_under_dcps_wrappers():
    """A full disk under DCP: each rank's failure is torch.save's RuntimeError ("unexpected pos"),
    raised while handling the OSError; save_engine names the OSError, nothing else counts as one."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        try:
            raise OSError(28, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")  # noqa: B904
    except RuntimeError as e:
        wrapped = CheckpointException("write", {0: (e, [])})
    found = write_failure(wrapped)
    assert isinstance(found, OSError) and found.errno == 28
    assert write_failure(CheckpointException("write", {0: (ValueError("bad shape"), [])})) is None
