"""The vLLM rollout: an in-process vLLM engine beside the FSDP2 actor on every rank (the hybrid engine).

The engine is created on all ranks together, after the FSDP2 engine, in vLLM's external-launcher
mode: it joins the worker's existing torch.distributed group instead of starting its own processes
(vLLM first and a second group for FSDP fails; a separate process per rank costs a weight copy
through Ray on every sync). It starts from `rollout.load_format` (verl's default `dummy`: random
weights, the first weight sync brings the actor's; any other format reads the model folder, which
holds the actor's initial weights, so no first sync is needed), and every step's sync after an
update replaces them (`update_weights`). `rollout.engine_kwargs.vllm` adds vLLM engine arguments.

With LoRA (model.lora_rank > 0) the engine serves the actor's adapter with vLLM's own LoRA support
(`enable_lora`, one adapter slot, max_lora_rank rounded up to a size vLLM offers). The base weights
arrive once (from disk, or in the first sync); after each update only the adapter is sent:
`update_adapter` builds vLLM's LoRA model from the in-memory tensors on the engine's worker and
swaps it into the slot under the same id (no file, no reload of the base), and every request then
runs with that adapter. With verl 0.9's model.lora.merge the engine has no LoRA: every sync sends
the weights with the adapter merged in (weight_sync.py's MergedSync), as without LoRA.

Creating the engine has process-wide side effects (engine_state.py undoes them): it reseeds the
torch/python/numpy RNGs, replaces `torch.set_num_threads` by a no-op and edits a few environment
variables. Sampling never touches the training RNG: every request carries its own seed, derived
from (rollout.seed, owner rank, call, prompt row), so the same config gives the same tokens.

With `tensor_model_parallel_size` > 1 (verl's default is 2) the ranks of a TP group run one engine
together: they gather their prompt chunks and generate the whole group's batch identically
(tp_group.py). Weight sync is unchanged: every rank hands vLLM the full tensors and vLLM's weight
loaders keep their TP slice. vLLM's custom all-reduce is off, as verl has it: it maps the other TP
ranks' device buffers into each process (CUDA IPC), and a Ray worker sees only its own GPU, so the
TP group's all-reduces go through NCCL instead.
On CPU, vLLM's TP shared memory has the same names in every run: a killed run's are removed first
(cpu_shm.py).

On a GPU, `free_cache_engine` lets the engine sleep between rollouts (level 2: weights and KV cache
released, nothing copied to the host; `release`, which the worker calls after a rollout unless
another follows at once, weight_sync.RolloutWeights) and wakes the weights, syncs them if the actor
moved, then wakes the KV cache before the next rollout (vllm_sleep.py says why and in which order). With LoRA it sleeps at
level 1 instead: the base weights are parked on the host and stay valid, since a sync then brings
only the adapter. vLLM has no sleep mode on CPU, where the engine stays awake (documented in
docs/hybrid_engine.md).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Iterator

import torch

from verl_lite.engine.lora_spec import served_adapter
from verl_lite.engine.parallelize import parse_dtype
from verl_lite.rollout import VLLM_LORA_RANKS, cpu_shm
from verl_lite.rollout.base import Rollout, SamplingParams, TokenRequest, TokenResult, folder_stop_ids
from verl_lite.rollout.engine_state import prepare_engine_env, preserved_process_state
from verl_lite.rollout.tp_group import TPGroup
from verl_lite.rollout.vllm_args import CPU_BLOCK_SIZE
from verl_lite.rollout.vllm_landed import landed_on_worker
from verl_lite.rollout.vllm_reload import record_cpu_gemm_layers, reload_weights
from verl_lite.rollout.vllm_sleep import Call, EngineMemory
from verl_lite.utils import device as dev
from verl_lite.utils import import_gc
from verl_lite.utils.hf_model import model_files

GB = 1024**3
LORA_ID = 1  # the one adapter slot: the actor's adapter, replaced in place at every sync


def with_tied_lm_head(
    named_tensors: Iterable[tuple[str, torch.Tensor]],
) -> Iterator[tuple[str, torch.Tensor]]:
    """The actor's parameters, plus `lm_head.weight` as the input embedding where the two are tied.

    The actor lists a tied weight once (as the embedding); vLLM's in-place reload handles its
    lm_head as a layer of its own and, not given one, keeps the dummy head: sampling from random
    logits while every other weight is right (measured: log-prob diffs of ~4 nats)."""
    for name, tensor in named_tensors:
        yield name, tensor
        if name.endswith("embed_tokens.weight"):
            yield "lm_head.weight", tensor


def iter_buckets(
    named_tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int, stats: dict
) -> Iterator[tuple[str, torch.Tensor]]:
    """Pass tensors through a bucket at a time: up to `bucket_bytes` are gathered before any is handed
    on, and the next bucket is gathered only when the consumer asks for more. `stats` counts bytes
    and buckets. A tensor larger than the bucket is a bucket of its own."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in named_tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            stats["num_buckets"] += 1
            yield from bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
        stats["bytes"] += nbytes
    if bucket:
        stats["num_buckets"] += 1
        yield from bucket


# LLM(...) arguments the hybrid engine sets itself, and the verl_lite key that sets each (if any)
RESERVED_VLLM_ARGS = {
    "model": "actor_rollout_ref.model.path",
    "skip_tokenizer_init": "",
    "distributed_executor_backend": "",
    "tensor_parallel_size": "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "dtype": "actor_rollout_ref.rollout.dtype",
    "load_format": "actor_rollout_ref.rollout.load_format",
    "seed": "actor_rollout_ref.rollout.seed",
    "enable_sleep_mode": "actor_rollout_ref.rollout.free_cache_engine",
    "disable_custom_all_reduce": "",
    "logprobs_mode": "actor_rollout_ref.rollout.logprobs_mode",
    "enable_lora": "actor_rollout_ref.model.lora_rank",
    "max_loras": "",
    "max_lora_rank": "actor_rollout_ref.model.lora_rank",
}


def vllm_max_lora_rank(rank: int) -> int:
    """The smallest max_lora_rank vLLM offers that holds `rank`."""
    fitting = [r for r in VLLM_LORA_RANKS if r >= rank]
    if not fitting:
        raise ValueError(
            f"actor_rollout_ref.model.lora_rank={rank}: vLLM serves LoRA ranks up to {VLLM_LORA_RANKS[-1]}; "
            "use a smaller rank or rollout.name=hf"
        )
    return fitting[0]


def engine_kwargs(model_cfg, r, enable_sleep_mode: bool) -> dict:
    """`LLM(...)` arguments from the model and rollout config sections (verl's key names), then
    rollout.engine_kwargs.vllm (null values dropped, as verl does); rollout/checks.py refuses the
    reserved ones at start-up."""
    kwargs = dict(
        model=model_files(model_cfg),  # model.use_shm: its /dev/shm copy
        skip_tokenizer_init=True,  # prompts go in as token ids and come out as ids
        trust_remote_code=model_cfg.trust_remote_code,
        # vLLM picks its own attention backend: attn_implementation is for the FSDP2 models
        hf_overrides={
            k: v for k, v in (model_cfg.override_config or {}).items() if k != "attn_implementation"
        }
        or None,
        dtype=parse_dtype(r.dtype, "actor_rollout_ref.rollout.dtype"),
        load_format=r.load_format,  # verl's dummy: random weights, nothing read from disk; the first sync brings them
        seed=r.seed,
        distributed_executor_backend="external_launcher",  # join the worker's process group
        tensor_parallel_size=r.tensor_model_parallel_size,
        disable_custom_all_reduce=True,  # each Ray worker sees one GPU: no cross-process buffers (verl's)
        gpu_memory_utilization=r.gpu_memory_utilization,
        enforce_eager=r.enforce_eager,
        max_model_len=r.max_model_len,
        max_num_batched_tokens=r.max_num_batched_tokens,
        max_num_seqs=r.max_num_seqs,
        enable_chunked_prefill=r.enable_chunked_prefill,
        enable_prefix_caching=r.enable_prefix_caching,
        enable_sleep_mode=enable_sleep_mode,
        logprobs_mode="processed_logprobs",  # log-probs of the distribution sampled from
        disable_log_stats=r.disable_log_stats,
    )
    if not dev.has_accelerator():
        # on CPU vLLM reads gpu_memory_utilization as a share of *host* memory, which ranks share
        kwargs["kv_cache_memory_bytes"] = int(r.cpu_kv_cache_gb * GB)
        kwargs["block_size"] = CPU_BLOCK_SIZE  # vLLM's CPU default is 128: slower (vllm_args.py)
    lora = served_adapter(model_cfg)  # lora.merge: plain weights, no LoRA slot
    if lora is not None:
        kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=vllm_max_lora_rank(lora.max_rank))
    kwargs.update({k: v for k, v in dict(r.engine_kwargs.vllm).items() if v is not None})
    return kwargs


def _load_adapter_on_worker(worker, lora_id: int, tensors: dict, config: dict) -> int:
    """Runs on the engine's worker (collective_rpc): vLLM's LoRA model from in-memory tensors in
    PEFT's format, swapped into the adapter slot under `lora_id`. Mirrors what vLLM does when it
    loads an adapter folder (same validation, name mapping and vocabulary), minus the files."""
    from vllm.lora.lora_model import LoRAModel
    from vllm.lora.peft_helper import PEFTHelper

    manager = worker.model_runner.lora_manager
    helper = PEFTHelper.from_dict({**config, "vllm_max_position_embeddings": manager.max_position_embeddings})
    helper.validate_legal(manager.lora_config)
    slots = manager._adapter_manager  # vLLM's adapter cache and slots (no public call takes tensors)
    mapper = getattr(slots.model, "hf_to_vllm_mapper", None)
    lora = LoRAModel.from_lora_tensors(
        lora_id,
        tensors,
        helper,
        device="cpu",
        dtype=manager.lora_config.lora_dtype,
        model_vocab_size=manager.vocab_size,
        weights_mapper=mapper.get_rename_mapper() if mapper is not None else None,
    )
    supported = {
        part for m in slots.supported_lora_modules for part in slots.packed_modules_mapping.get(m, [m])
    }
    unserved = sorted(m for m in lora.loras if m.rsplit(".", 1)[-1] not in supported)
    if unserved:
        raise ValueError(f"vLLM has no LoRA support for {unserved}; it serves {sorted(supported)}")
    slots.remove_adapter(lora_id)
    slots.add_adapter(lora)
    slots.activate_adapter(lora_id)
    return len(lora.loras)


class VLLMRollout(Rollout):
    def __init__(self, model_cfg, rollout_cfg, tokenizer, rank: int):
        r = rollout_cfg
        super().__init__(r.seed, rank)  # validation calls are counted apart from training's
        prepare_engine_env()
        with import_gc.later_imports():  # vLLM's ~400k objects out of its engine build's collections
            from vllm import LLM  # after prepare_engine_env: vLLM reads its env vars at import

        self.eos_id, self.pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
        self.stop_ids = folder_stop_ids(self.eos_id, model_files(model_cfg))
        self.bucket_bytes = int(r.update_weights_bucket_megabytes * 1024**2)
        self.lora_enabled = served_adapter(model_cfg) is not None
        self.lora_request = None  # LoRA: the synced adapter every request runs with
        # no sleep mode on CPU. LoRA syncs only the adapter, so its base weights must survive a sleep
        # (level 1, kept on the host) rather than be discarded (level 2) and re-sent every step
        self.memory = EngineMemory(
            sleep_enabled=r.free_cache_engine and dev.has_accelerator(), keep_weights=self.lora_enabled
        )
        if r.load_format != "dummy":  # read from model.path at start-up: valid before any sync
            self.memory.after_sync()
        self.tp_group = TPGroup(r.tensor_model_parallel_size)  # before LLM(): a clear error on a bad size
        on_host_tp = r.tensor_model_parallel_size > 1 and not dev.has_accelerator()
        if on_host_tp:
            cpu_shm.remove_stale()  # a killed TP run's shared memory would stop this one (cpu_shm.py)
        with preserved_process_state(), record_cpu_gemm_layers():
            try:
                self.llm = LLM(**engine_kwargs(model_cfg, r, self.memory.sleep_enabled))
            except RuntimeError as e:
                if not (on_host_tp and "SHMManager" in str(e)):
                    raise
                raise RuntimeError(f"{e}. {cpu_shm.collision()}") from e
        self.tied_lm_head = bool(
            getattr(self.llm.llm_engine.model_config.hf_config, "tie_word_embeddings", False)
        )
        self.direct_reload = False  # whether the last sync skipped vLLM's layer-wise reload (vllm_reload.py)
        self.adapter_sent: dict | None = None  # LoRA: what the last update_adapter sent (the sync check)
        self._run(self.memory.sleep())

    @property
    def weights_loaded(self) -> bool:
        return self.memory.weights_valid

    def needs_sync(self, actor_changed: bool) -> bool:
        """Also before the first adapter: with LoRA the engine serves no policy until it has one."""
        no_adapter = self.lora_enabled and self.lora_request is None
        return super().needs_sync(actor_changed) or no_adapter

    def release(self) -> None:
        """Sleep (GPU): the KV cache and, at level 2, the weights leave the device (vllm_sleep.py)."""
        self._run(self.memory.sleep())

    def _run(self, calls: list[Call]) -> None:
        """Make the sleep/wake calls EngineMemory decided on."""
        for method, kwargs in calls:
            getattr(self.llm, method)(**kwargs)

    # --- weight sync --------------------------------------------------------------------------------
    @torch.no_grad()
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> dict[str, float]:
        """Load the actor's full weights (an iterator every rank walks together) into the engine.

        One load pass consumes the tensors bucket by bucket (vllm_reload.py: the model's own
        `load_weights` and a re-pack of the CPU GEMM layers, or vLLM's layer-wise `reload_weights`
        where that is not known to be equivalent). The prefix cache is reset afterwards: cached
        prefixes hold the old weights' keys and values.
        """
        self._run(self.memory.before_sync())
        start, stats = time.perf_counter(), {"bytes": 0, "num_buckets": 0}
        if self.tied_lm_head:
            named_tensors = with_tied_lm_head(named_tensors)
        buckets = iter_buckets(named_tensors, self.bucket_bytes, stats)
        self.direct_reload = all(self.llm.collective_rpc(reload_weights, args=(buckets,)))
        for _ in buckets:  # the actor's gather is collective: walk to the end even if vLLM stopped early
            pass
        self.llm.reset_prefix_cache()
        self.memory.after_sync()
        return {
            "update_weights_s": time.perf_counter() - start,
            "update_weights_gb": stats["bytes"] / GB,
            "update_weights_buckets": stats["num_buckets"],
        }

    @torch.no_grad()
    def update_adapter(self, tensors: dict[str, torch.Tensor], config: dict) -> dict[str, float]:
        """LoRA: replace the served adapter by `tensors` (full tensors in PEFT's file format) with
        `config` (adapter_config.json's fields). The base weights stay as they are. The prefix cache
        is reset: cached prefixes hold the old adapter's keys and values."""
        from vllm.lora.request import LoRARequest

        self._run(self.memory.before_sync())
        start = time.perf_counter()
        # copies: vLLM scales lora_B in place, and a full tensor may share the actor's storage (1 rank)
        tensors = {k: v.detach().clone() for k, v in tensors.items()}
        self.llm.collective_rpc(_load_adapter_on_worker, args=(LORA_ID, tensors, config))
        self.adapter_sent = {"config": config, "lora_id": LORA_ID, "names": sorted(tensors)}
        self.llm.reset_prefix_cache()
        # the adapter is in the slot already: the path is never read (vLLM asks for a non-empty one)
        self.lora_request = LoRARequest(lora_name="actor", lora_int_id=LORA_ID, lora_path="in-memory")
        nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
        return {"update_weights_s": time.perf_counter() - start, "update_weights_gb": nbytes / GB}

    def landed_fingerprints(self, base: bool, adapter: bool) -> dict:
        """The engine's weights as they are now (rollout/weight_check.py), read on its worker: each
        rank's shares added over the TP group (vllm_tp_layout.py: every value counted once)."""
        from verl_lite.rollout.weight_check import Landed

        sent = self.adapter_sent if adapter else None
        if adapter and sent is None:  # no adapter ever synced: report the slot's zero tensors
            sent = {"config": {}, "lora_id": LORA_ID, "names": []}
        mine = self.llm.collective_rpc(landed_on_worker, args=(base, sent, self.tied_lm_head))[0]
        members, _ = self.tp_group.gather_objects({n: e[0] for n, e in mine.items()})
        out = {}
        for name, (_, dtype, parts, scale) in mine.items():
            held = [m.get(name) for m in members]
            if any(h is None for h in held):  # a rank that cannot say: the entry is not verified
                continue
            out[name] = Landed(sum(held[1:], held[0]), dtype, parts, scale)
        return out

    # --- generation ---------------------------------------------------------------------------------
    def request_seed(self, call: int | tuple[int, ...], owner: int, row: int) -> int:
        """The seed of row `row` of rank `owner`'s chunk: the same on every rank of a TP group."""
        call = call if isinstance(call, tuple) else (call,)
        return hash((self.seed, owner, *call, row)) % (2**31)  # ints only: stable across processes

    def _sampling(self, params: SamplingParams, seed: int):
        from vllm import SamplingParams as VLLMSamplingParams

        return VLLMSamplingParams(
            n=params.n,
            temperature=0.0 if params.greedy else params.temperature,
            top_p=1.0 if params.greedy else params.top_p,
            top_k=-1 if params.greedy or params.top_k <= 0 else params.top_k,
            max_tokens=params.response_length,
            ignore_eos=params.ignore_eos,
            stop_token_ids=[] if params.ignore_eos else self.stop_ids,
            logprobs=0,  # the sampled token's log-prob only
            detokenize=False,
            seed=seed,
        )

    @torch.no_grad()
    def generate_tokens(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(responses (B*n, <=R) padded with pad, their sampled-token log-probs (B*n, <=R), 0 in padding)."""
        from vllm.inputs import TokensPrompt

        self._run(self.memory.before_generate())  # raises while the weights are dummy or discarded
        if self.lora_enabled and self.lora_request is None:
            raise RuntimeError("vLLM rollout: LoRA is on but no adapter was synced (update_adapter)")
        call = self.next_call(params.validate)
        batch = self.tp_group.gather(prompt_ids, prompt_mask)  # the TP group's prompts (own chunk if TP=1)
        prompts = [
            TokensPrompt(prompt_token_ids=ids[m.bool()].tolist())
            for ids, m in zip(batch.prompt_ids, batch.prompt_mask)
        ]
        # vLLM refuses n > 1 for greedy decoding: one request per prompt, its answer repeated n times
        per_request = dataclasses.replace(params, n=1) if params.greedy else params
        sampling = [
            self._sampling(per_request, self.request_seed(call, owner, row)) for owner, row in batch.origins
        ]
        # seeded requests draw from their own generators, but the sampler still advances the global RNG
        with dev.fork_rng():
            outputs = self.llm.generate(prompts, sampling, use_tqdm=False, lora_request=self.lora_request)
        repeat = params.n if params.greedy else 1
        samples = [
            s for out in outputs[batch.own_rows] for s in out.outputs for _ in range(repeat)
        ]  # this rank's prompts only, each prompt's n samples adjacent
        ids = [list(s.token_ids) for s in samples]
        logps = [[step[tok].logprob for step, tok in zip(s.logprobs, row)] for s, row in zip(samples, ids)]
        width = max(1, max(map(len, ids), default=0))
        return _padded(ids, width, self.pad_id, torch.long), _padded(logps, width, 0.0, torch.float32)

    @property
    def engine_group_size(self) -> int:
        return self.tp_group.size

    def gather_group(self, obj) -> list:
        return self.tp_group.gather_objects(obj)[0]

    @torch.no_grad()
    def generate_requests(
        self, requests: list[TokenRequest], call: tuple[int, ...]
    ) -> tuple[list[TokenResult], bool]:
        """Multi-turn requests (base.Rollout): the TP group's in one generate call, each with its own
        token budget and a seed from (rollout.seed, owner rank, call, request key)."""
        from vllm.inputs import TokensPrompt

        members, me = self.tp_group.gather_objects(list(requests))
        everyone = [(m, r) for m, reqs in enumerate(members) for r in reqs]
        if not everyone:
            return [], False
        self._run(self.memory.before_generate())  # wakes only what sleeps: the first turn's call
        if self.lora_enabled and self.lora_request is None:
            raise RuntimeError("vLLM rollout: LoRA is on but no adapter was synced (update_adapter)")
        prompts = [TokensPrompt(prompt_token_ids=list(r.prompt_ids)) for _, r in everyone]
        sampling = [
            self._sampling(
                dataclasses.replace(r.params, n=1, response_length=r.max_tokens),
                self.request_seed((*call, *r.key), self.tp_group.first + m, 0),
            )
            for m, r in everyone
        ]
        with dev.fork_rng():
            outputs = self.llm.generate(prompts, sampling, use_tqdm=False, lora_request=self.lora_request)
        start = sum(len(reqs) for reqs in members[:me])
        results = []
        for out in outputs[start : start + len(requests)]:
            sample = out.outputs[0]
            ids = list(sample.token_ids)
            logps = [step[tok].logprob for step, tok in zip(sample.logprobs, ids)]
            stop = "length" if sample.finish_reason == "length" else "eos"
            # vLLM's scheduler may preempt under KV-cache pressure; read as verl's server reads it
            results.append(TokenResult(ids, logps, stop, getattr(sample, "num_preempted", None)))
        return results, True


def _padded(rows: list[list], width: int, pad, dtype: torch.dtype) -> torch.Tensor:
    """(len(rows), width): the rows right-padded with `pad`, built in one tensor call."""
    return torch.tensor([row + [pad] * (width - len(row)) for row in rows], dtype=dtype).reshape(-1, width)
