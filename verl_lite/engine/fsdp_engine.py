"""FSDPEngine: one FSDP2-sharded model on one rank, with its optimizer, run in named phases.

The engine loads a local HF model, shards it (parallelize.py), and owns every loop over it. Its
verbs take a batch of tensors in verl's layout and a function for one micro-batch:

    forward(tensors, head, ...)       head(output, micro) -> (rows, R', ...) for each micro-batch,
                                      without gradients; returns (bs, R, ...) in the rows' order
    update(tensors, loss_fn, ...)     ppo_epochs x mini-batches x micro-batches: loss_fn(output,
                                      micro, scale) -> (loss share, metric shares); one optimizer
                                      step per mini-batch; returns the metrics
    iter_full_params(...)             full weights for the rollout, a bucket per collective

Workers keep only their heads and losses; a causal LM's caller passes a `TokenRequest` and reads
per-token log-probs (and entropy) from `output.tokens`, never the logits (forward.py). Micro-batches are planned on the host (micro_batch.py:
fixed sizes or a token budget, each cut to the columns it needs), the batch moves to the device
once per verb, and the engine reads nothing back per micro-batch: outputs and metric shares stay on
the device until the verb (or the mini-batch) ends (the actor's rollout-correction metrics are the
exception: workers/actor.py reads them per micro-batch). The model runs in one place (forward.py).

Each verb runs inside `phase(name)`: the offload mode (offload.py) brings params in and takes them
out, gathered params are resharded, cached device blocks are released, and the seconds counted.

The ranks are laid out by engine/mesh.py: an FSDP mesh (all ranks; 2-D for HSDP) that shards the
params and reduces gradients, and the data-parallel group (ranks holding different rows; smaller
than the mesh under sequence parallelism) that counts tokens, sums metrics and agrees on the number
of micro-batches.

Exactness across ranks: FSDP2 reduce-scatters gradients as a mean over the mesh's ranks, while
the loss shares are normalised by mini-batch-wide counts over the data-parallel ranks (the
`LossScale` the update computes for each mini-batch, algos/loss_agg.py). The engine therefore
multiplies each share by the mesh size before backward, so the reduced gradient is the gradient of
the sum of shares, i.e. of the full-batch loss. With `reduce_scatter_every_micro_batch=False` gradients
accumulate unsharded and are reduced once, on the last micro-batch (`set_requires_gradient_sync`);
the sum is the same.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule

from verl_lite.algos.loss_agg import LossScale
from verl_lite.config.schema import FSDPConfig, ModelConfig, OptimConfig
from verl_lite.engine.activation_offload import ActivationOffload
from verl_lite.engine.attention import KEY, requested_attention, select_attention
from verl_lite.engine.forward import (
    ForwardOutput,
    MicroBatch,
    TokenMath,
    TokenRequest,
    build_micro_batches,
    build_model_forward,
)
from verl_lite.engine.forward import response_width as batch_response_width
from verl_lite.engine.grad_clip import clip_grad_norm
from verl_lite.engine.lora import apply_lora
from verl_lite.engine.lora_spec import LoraSpec
from verl_lite.engine.mesh import Layout
from verl_lite.engine.micro_batch import MicroPlan, plan_micro_batches
from verl_lite.engine.model_shape import storage_dtype
from verl_lite.engine.offload import build_offload
from verl_lite.engine.optim import build_lr_scheduler, build_optimizer, num_warmup_steps
from verl_lite.engine.parallelize import apply_fsdp2, build_mp_policy, decoder_layers, parse_dtype
from verl_lite.engine.token_head import TokenHead, apply_token_head
from verl_lite.engine.transfers import TransferLog
from verl_lite.engine.ulysses import apply_ulysses
from verl_lite.engine.weight_gather import iter_full_params
from verl_lite.utils import device as dev
from verl_lite.utils.hf_model import MODEL_LOADERS
from verl_lite.utils.metric_reduce import reduce_local_updates

# FSDP2 warns when a wrapped model returns a view (the token-classification heads of the critic and
# reward model do): in-place ops on it would skip the pre-backward hook. Callers here only read
# model outputs out of place (slices, .float(), gathers), so the warning is noise on every update.
warnings.filterwarnings(
    "ignore", message=r"FSDP2-wrapped module .* returned a view tensor", category=UserWarning
)

log = logging.getLogger(__name__)
Head = Callable[[ForwardOutput, MicroBatch], torch.Tensor]
LossFn = Callable[[ForwardOutput, MicroBatch, LossScale], tuple[torch.Tensor, dict[str, torch.Tensor]]]


class FSDPEngine:
    def __init__(
        self,
        model_cfg: ModelConfig,
        fsdp_cfg: FSDPConfig,
        layout: Layout | DeviceMesh,
        *,
        role: str,
        optim_cfg: OptimConfig | None = None,
        grad_clip: float | None = None,
        module: torch.nn.Module | None = None,
        model_kind: str = "causal_lm",
        entropy: TokenMath | None = None,
        sp_key: str = "ulysses_sequence_parallel_size",
    ):
        """`module`: an already built model to shard instead of loading `model_cfg.path` (the
        benchmark's randomly initialised real shapes, which are never written to disk).
        `model_kind`: causal_lm (actor, ref), value (critic) or reward (reward model); see
        utils/hf_model.py. `model_cfg.use_remove_padding` packs every forward (engine/packing.py).
        `layout`: engine/mesh.py's, or a
        1-D mesh (all ranks shard, all hold different rows); with sequence parallelism (layout.sp_size
        > 1, `sp_key` names its config key in errors) the forward is ulysses.py's.
        The memory levers read from `model_cfg`: use_fused_kernels (causal LMs: per-token results
        from the fused head, token_head.py) and enable_activation_offload (activation_offload.py);
        `entropy`: the actor's entropy chunking / checkpointing (its `fused` is ignored)."""
        self.layout = layout if isinstance(layout, Layout) else Layout.of_mesh(layout)
        self.role, self.mesh, self.grad_clip = role, self.layout.fsdp_mesh, grad_clip
        self.device = dev.local_device()
        self.reduce_every_micro = fsdp_cfg.reduce_scatter_every_micro_batch
        self.transfers = TransferLog()
        self.offload = build_offload(fsdp_cfg, self.device, self.transfers)
        fused = model_kind == "causal_lm" and getattr(model_cfg, "use_fused_kernels", False)
        token_math = dataclasses.replace(entropy or TokenMath(), fused=fused)
        sp_group = self.layout.sp_group if self.layout.sp_size > 1 else None
        self.run_model = build_model_forward(model_cfg.use_remove_padding, token_math, sp_group)
        self._build_module(model_cfg, fsdp_cfg, module, model_kind, trains=optim_cfg is not None)
        self.activations = None  # saved activations to the host in training forwards
        if getattr(model_cfg, "enable_activation_offload", False):
            self.activations = ActivationOffload(self.device, self.transfers)
            self.activations.apply(self.layers)
        apply_ulysses(self.module, self.layout.sp_size, sp_key)
        self.optimizer = self.lr_scheduler = None
        if optim_cfg is not None:
            self._build_optimizer(optim_cfg)
        self.offload.attach(self.module, self.optimizer, self.wrapped)
        self.timings: dict[str, float] = {}
        self.num_skipped_steps = 0
        self._phase: str | None = None

    def _build_module(self, model_cfg, fsdp_cfg, module, model_kind: str, trains: bool) -> None:
        """Load (or take) the model in its storage dtype -- model_dtype, or for a frozen engine its
        compute dtype (model_shape.storage_dtype: the same numbers in fewer bytes) -- and shard it."""
        role, mp = self.role, fsdp_cfg.mixed_precision
        parse_dtype(fsdp_cfg.model_dtype, f"{role}.fsdp_config.model_dtype")
        stored = storage_dtype(fsdp_cfg.model_dtype, mp.param_dtype, trains)
        dtype = parse_dtype(stored, f"{role}.fsdp_config.mixed_precision.param_dtype")
        self.attention = select_attention(
            requested_attention(model_cfg.override_config),
            accelerator=dev.has_accelerator(),
            sp_size=self.layout.sp_size,
            trains=trains,
        )
        kernel = self.attention.implementation
        if module is None:
            module = MODEL_LOADERS[model_kind](model_cfg, dtype, attn_implementation=kernel)
        elif module.config._attn_implementation != kernel:  # a given module (benchmarks): the same choice
            module.set_attn_implementation(kernel)
        self.module = module
        if self.attention.why:
            log.info(
                "%s: %s=%s runs %s (%s)", role, KEY, self.attention.requested, kernel, self.attention.why
            )
        if not trains:  # a given module (benchmarks) too; buffers keep theirs (buffer_dtype below)
            for param in self.module.parameters():
                param.data = param.data.to(dtype)
        if self.run_model.math.fused:
            apply_token_head(self.module)  # before fully_shard: the head keeps its place in the root unit
        self.layers = decoder_layers(self.module)  # before fully_shard renames their classes
        if model_cfg.enable_gradient_checkpointing:
            self.module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.lora_config = None  # LoRA (engine/lora.py): adapters on the frozen model, in the same FSDP units
        lora = LoraSpec.of(model_cfg, model_kind)
        if lora is not None:
            self.module = apply_lora(self.module, lora)
            self.lora_config = self.module.peft_config["default"]
            if self.run_model.math.fused and not isinstance(self.module.get_output_embeddings(), TokenHead):
                # an adapter wraps the head: its requests would reach the wrapper, not the TokenHead
                raise ValueError(
                    "model.use_fused_kernels=True cannot run with a LoRA adapter on the LM head: leave it out "
                    "of target_modules (or the adapter), or set use_fused_kernels=False"
                )
        # what never changes: not trained, not in checkpoints' model/, not re-sent to the rollout
        # (tied weights under every name they have, e.g. lm_head.weight beside embed_tokens.weight)
        self.frozen_names = frozenset(
            n for n, p in self.module.named_parameters(remove_duplicate=False) if not p.requires_grad
        )
        self.wrapped = apply_fsdp2(
            self.module,
            self.mesh,
            reshard_after_forward=fsdp_cfg.reshard_after_forward,
            min_num_params=fsdp_cfg.wrap_policy.min_num_params,
            mp_policy=build_mp_policy(mp.param_dtype, mp.reduce_dtype, f"{role}.fsdp_config.mixed_precision"),
            offload_policy=self.offload.fsdp_policy(),
            forward_prefetch=fsdp_cfg.forward_prefetch,
        )
        self.offload.place(self.module)
        buffer_dtype = parse_dtype(mp.buffer_dtype, f"{role}.fsdp_config.mixed_precision.buffer_dtype")
        for sub in self.module.modules():
            for name, buf in sub._buffers.items():
                if buf is not None and buf.is_floating_point():
                    sub._buffers[name] = buf.to(buffer_dtype)

    def _build_optimizer(self, optim_cfg: OptimConfig) -> None:
        self.optimizer = build_optimizer(
            [p for p in self.module.parameters() if p.requires_grad],
            optim_cfg.lr,
            optim_cfg.betas,
            optim_cfg.weight_decay,
        )
        total = optim_cfg.total_training_steps
        self.lr_scheduler = build_lr_scheduler(
            self.optimizer,
            warmup_steps=num_warmup_steps(optim_cfg.lr_warmup_steps, optim_cfg.lr_warmup_steps_ratio, total),
            total_steps=total,
            style=optim_cfg.lr_scheduler_type,
            min_lr_ratio=optim_cfg.min_lr_ratio,
            num_cycles=optim_cfg.num_cycles,
        )

    # --- topology ---------------------------------------------------------------------------------
    @property
    def dp_size(self) -> int:
        """Ranks holding different rows."""
        return self.layout.dp_size

    @property
    def dp_rank(self) -> int:
        return self.layout.dp_rank

    def _all_reduce(self, tensor: torch.Tensor, op) -> torch.Tensor:
        """A small host tensor reduced over the data-parallel ranks (gloo carries host tensors on
        every machine)."""
        tensor = tensor.detach().to("cpu", torch.float64).clone()
        if self.dp_size > 1:
            dist.all_reduce(tensor, op=op, group=self.layout.dp_group)
        return tensor

    def dp_all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        return self._all_reduce(tensor, dist.ReduceOp.SUM)

    def _agree_max(self, n: int) -> int:
        return int(self._all_reduce(torch.tensor([n]), dist.ReduceOp.MAX).item())

    # --- phases -----------------------------------------------------------------------------------
    @contextmanager
    def phase(self, name: str, streamed: bool = False):
        """Run one phase (e.g. 'compute_log_prob', 'update'): the offload mode brings the params in
        and takes them out; seconds land in `timings`. A nested phase joins the outer one.
        `streamed`: the phase reads the params first in a forward, so manual offload may let each
        unit's forward wait for its own shard only (the forward and update verbs).

        Leaving a phase also reshards every FSDP unit (a forward without backward leaves units
        built with reshard_after_forward=False gathered) and returns cached device blocks: the next
        phase may be another process's on the same GPU (vLLM's KV cache, a colocated critic)."""
        if self._phase is not None:
            yield
            return
        start = time.perf_counter()
        self.offload.enter_phase(name, streamed)  # a failure here leaves no phase open
        self._phase = name
        try:
            yield
        finally:
            self._phase = None  # first: a later phase starts afresh even if leaving this one raises
            for module in self.module.modules():
                if isinstance(module, FSDPModule):
                    module.reshard()
            self.offload.exit_phase(name)
            dev.empty_cache()
            dev.synchronize()
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start

    def pop_metrics(self) -> tuple[dict[str, float], dict]:
        """(seconds per phase and skipped steps, offload moves per phase) since the last call."""
        out = {f"timing_s/{self.role}/{k}": v for k, v in self.timings.items()}
        if self.optimizer is not None:
            out[f"{self.role}/nonfinite_grad_skips"] = self.num_skipped_steps
        self.timings, self.num_skipped_steps = {}, 0
        return out, self.transfers.pop()

    # --- micro-batches ----------------------------------------------------------------------------
    def plan(self, tensors: dict[str, torch.Tensor], micro_size: int | None, max_token_len: int | None):
        """This rank's micro-batch plans for a batch (host tensors): `micro_size` rows each, or, with
        a token budget, as many budget-bound groups as the most demanding rank needs."""
        return plan_micro_batches(
            tensors["attention_mask"],
            batch_response_width(tensors),
            micro_size=micro_size,
            # verl: a sequence-parallel group shares sp x the per-GPU budget (each rank holds 1/sp)
            max_token_len=max_token_len * self.layout.sp_size if max_token_len else max_token_len,
            packed=self.run_model.name == "packed",
            agree_max=self._agree_max,
        )

    def _micro_batches(self, host, on_device, plans: list[MicroPlan]) -> list[MicroBatch]:
        return build_micro_batches(host, on_device, plans, self.run_model, dev.to_device, self.device)

    def _to_device(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: dev.to_device(v, self.device) for k, v in tensors.items()}

    def model_forward(self, micro: MicroBatch, request: TokenRequest | None = None) -> ForwardOutput:
        """The model on one micro-batch: the one place a forward happens (call it inside
        `self.run_model.context(micro)`)."""
        self.offload.on_forward(training=torch.is_grad_enabled())
        return self.run_model(self.module, micro, request)

    def _saving_activations(self):
        """Around a training forward: with activation offload, what it saves waits on the host."""
        if self.activations is None:
            return contextlib.nullcontext()
        return self.activations.training_forward(self._phase or "update")

    # --- verbs ------------------------------------------------------------------------------------
    @torch.no_grad()
    def forward(
        self,
        tensors: dict[str, torch.Tensor],
        head: Head,
        *,
        micro_size: int | None,
        max_token_len: int | None = None,
        phase: str = "forward",
        request: TokenRequest | None = None,
    ) -> torch.Tensor:
        """head(output, micro) for every micro-batch of this rank's batch, without gradients.

        `head` returns a response-aligned (rows, micro.width, ...) tensor; the result is the
        (bs, R, ...) host tensor of all rows in their original order, zeros beyond each
        micro-batch's kept response columns (padding in every one of its rows). `request`: the
        per-token results a causal LM's output must carry (forward.py)."""
        host = {k: v.cpu() for k, v in tensors.items()}
        width = batch_response_width(host)
        with self.phase(phase, streamed=True):
            self.module.eval()
            plans = self.plan(host, micro_size, max_token_len)
            out = None
            for micro in self._micro_batches(host, self._to_device(host), plans):
                with self.run_model.context(micro):
                    value = head(self.model_forward(micro, request), micro)
                if value.shape[:2] != (micro.num_rows, micro.width):
                    raise ValueError(
                        f"a head must return (rows, width, ...) = {(micro.num_rows, micro.width)}, "
                        f"not {tuple(value.shape)}"
                    )
                if out is None:
                    out = value.new_zeros(len(host["attention_mask"]), width, *value.shape[2:])
                pad = [0, 0] * (value.dim() - 2) + [0, width - micro.width]
                out.index_copy_(0, micro.rows, F.pad(value, pad))
            return dev.to_host(out)

    def update(
        self,
        tensors: dict[str, torch.Tensor],
        loss_fn: LossFn,
        *,
        mini_size: int,
        micro_size: int | None,
        max_token_len: int | None = None,
        epochs: int = 1,
        response_length: int | None = None,
        request: TokenRequest | None = None,
        local_updates: bool = False,
    ) -> dict[str, float]:
        """`epochs` passes over this rank's rows, one optimizer step per local mini-batch of
        `mini_size` rows, then one step of the lr schedule (it counts training steps, as verl's).
        `local_updates` (verl 0.9's separate_async): each mini-batch is an update of its own -- its
        `epochs` passes, then one step of the lr schedule -- before the next mini-batch.

        The driver orders rows so that local mini-batch j of every rank together form global
        mini-batch j. For each mini-batch the response tokens and sequences (`response_mask`) are
        counted over all ranks into a LossScale (`response_length`: the configured R for
        seq-mean-token-sum-norm; None: the batch's width) that every loss_fn call gets. Returns the
        mean over mini-batches of each metric (sums of the shares over micro-batches and ranks),
        grad_norm and lr. Each micro-batch carries its `epoch` and `mini_batch` index: the weights
        are still those the update started with exactly in epoch 0's mini-batch 0, and a mini-batch's
        micro-batches are planned the same way in every epoch."""
        assert self.optimizer is not None, f"{self.role} engine was built without an optimizer"
        host = {k: v.cpu() for k, v in tensors.items()}
        num_rows = len(host["response_mask"])
        length = response_length or host["response_mask"].shape[1]
        history: dict[str, list[float]] = defaultdict(list)
        by_update: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        with self.phase("update", streamed=True):  # offloaded params come in once for all mini-batches
            self.module.train()
            on_device = self._to_device(host)
            starts = list(enumerate(range(0, num_rows, mini_size)))
            order = (
                [(e, i, s) for i, s in starts for e in range(epochs)]
                if local_updates
                else [(e, i, s) for e in range(epochs) for i, s in starts]
            )
            for epoch, index, start in order:
                part = slice(start, start + mini_size)
                mini = {k: v[part] for k, v in host.items()}
                scale = self.loss_scale(mini["response_mask"], length)
                plans = self.plan(mini, micro_size, max_token_len)
                micros = self._micro_batches(mini, {k: v[part] for k, v in on_device.items()}, plans)
                for micro in micros:  # where it is in the update: a loss may depend on it
                    micro.epoch, micro.mini_batch, micro.num_in_mini_batch = epoch, index, len(micros)
                for k, v in self._train_mini_batch(micros, loss_fn, scale, request).items():
                    history[k].append(v)
                    by_update[index][k].append(v)
                if local_updates and epoch == epochs - 1:
                    self.end_training_step()
        if not local_updates:
            self.end_training_step()
            return {k: sum(v) / len(v) for k, v in history.items()}
        # each local update's metrics (the mean over its epochs), then verl's reduction over them
        return {
            k: reduce_local_updates(
                k, [sum(u[k]) / len(u[k]) for _, u in sorted(by_update.items()) if u.get(k)]
            )
            for k in history
        }

    def loss_scale(self, mask: torch.Tensor, response_length: int) -> LossScale:
        """Token and sequence counts of this rank's part of a mini-batch (host mask), summed over
        ranks: the denominators every micro-batch's loss share uses."""
        mask = mask.cpu()
        local = torch.tensor([mask.sum(), (mask.sum(-1) > 0).sum()], dtype=torch.float64)
        num_tokens, num_seqs = self.dp_all_reduce_sum(local).tolist()
        return LossScale(num_tokens=num_tokens, num_seqs=num_seqs, response_length=response_length)

    def _train_mini_batch(self, micros: list[MicroBatch], loss_fn: LossFn, scale: LossScale, request):
        """Accumulate every micro-batch's gradient, clip, step: one optimizer step."""
        totals: dict[str, torch.Tensor] = {}
        last = len(micros) - 1
        for i, micro in enumerate(micros):
            sync = self.reduce_every_micro or i == last
            self.module.set_requires_gradient_sync(sync)
            with self.run_model.context(micro):
                with self._saving_activations():
                    output = self.model_forward(micro, request)
                loss, shares = loss_fn(output, micro, scale)
                (loss * self.layout.world_size).backward()
            if self.activations is not None:
                self.activations.flush()
            if sync:
                self.offload.on_grad_reduce()
            for k, v in shares.items():  # on the device: no host sync per micro-batch
                v = v.detach().to(torch.float64)
                totals[k] = totals[k] + v if k in totals else v
        return self._step(totals)

    def _step(self, totals: dict[str, torch.Tensor]) -> dict[str, float]:
        """Clip and step (skipped, and counted, when the grad norm is not finite); the metric shares
        and the norm come to the host together, once, and the shares are summed over ranks."""
        params = [p for p in self.module.parameters() if p.grad is not None]
        norm = clip_grad_norm(params, self.grad_clip if self.grad_clip else math.inf)
        keys = sorted(totals)
        local = torch.stack(
            [norm.detach().to(torch.float64).reshape(()).to(self.device)] + [totals[k] for k in keys]
        )
        local = dev.to_host(local)
        grad_norm = float(local[0])
        if math.isfinite(grad_norm):
            self.offload.step(self._phase or "update")
        else:  # a non-finite norm would poison the weights and Adam's moments: skip, count
            self.num_skipped_steps += 1
        self.optimizer.zero_grad(set_to_none=True)
        summed = self.dp_all_reduce_sum(local[1:]).tolist() if keys else []
        metrics = dict(zip(keys, summed))
        metrics["grad_norm"] = grad_norm
        metrics["lr"] = self.lr_scheduler.get_last_lr()[0]
        return metrics

    def end_training_step(self) -> None:
        """Advance the LR schedule: it counts training steps, as verl's does, not optimizer steps."""
        self.lr_scheduler.step()

    @contextmanager
    def adapters_disabled(self):
        """The frozen base model: LoRA's reference policy, without a second copy of the weights.

        PEFT's disable_adapter also turns the adapters' requires_grad off while it lasts. FSDP2 takes
        the dtype it casts gradients back to (the trainable params' dtype) at the module's first
        forward: if that forward is this one (the reference's log-probs first, as with use_kl_loss),
        it would see no trainable param, and with a bf16 param_dtype the update would then assign bf16
        gradients to fp32 params. The flags are put back at once: disabled adapters take no part in
        the forward, so they get no gradient either way."""
        if self.lora_config is None:
            raise RuntimeError(f"{self.role} engine has no LoRA adapters to disable")
        trainable = [p for p in self.module.parameters() if p.requires_grad]
        with self.module.disable_adapter():
            for p in trainable:
                p.requires_grad_(True)
            yield

    def iter_full_params(
        self,
        select: Callable[[str], bool] | None = None,
        *,
        bucket_bytes: int | None = None,
        dtype: torch.dtype | None = None,
        stats: dict | None = None,
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, full tensor) for every parameter whose name `select` accepts (all by default), in
        `dtype` (None: the master dtype), gathered a bucket of `bucket_bytes` per collective (None:
        one parameter each); every rank must iterate together, to the end. `stats["collectives"]`
        counts the gathers."""
        with self.phase("gather_weights"):
            yield from iter_full_params(self.module, self.device, bucket_bytes, dtype, stats, select)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters())

    def num_trainable_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters() if p.requires_grad)
