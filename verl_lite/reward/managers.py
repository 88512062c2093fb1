"""Reward managers by name (`reward_model.reward_manager`), built once from the config.

naive  rule scorer by data_source, the score on the last valid response token (naive.py).
dapo   naive plus DAPO's overlong-buffer penalty (Yu et al. 2025, sec. 3.4), with verl's keys in
       `reward_model.reward_kwargs`: max_resp_len and overlong_buffer_cfg.{enable, len, penalty_factor, log}.
       A response longer than max_resp_len - len loses (length - (max_resp_len - len)) / len * penalty_factor,
       i.e. up to penalty_factor at max_resp_len; shorter responses are not touched.
gdpo   naive, telling the scorer trainer.experiment_name (extra_info["experiment_name"]),
       as verl 0.9.1's gdpo manager does: adv_estimator=gdpo reads the components (algos/gdpo.py).
batch  the reward function called once per batch with lists (data_sources, solution_strs, ground_truths,
       extra_infos) and reward_model.reward_kwargs, as verl's batch manager calls it; it needs a
       custom_reward_function written for that call.
prime  every row scored in a pool of processes, positionally, a failing or late row scored 0 (prime.py).
Every manager keeps every key of a dict result as the response's extra info ("score" too), as verl's
do; dapo and gdpo record a plain number as `acc` too (naive records nothing for it).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields

from verl_lite.algos.registry import Registry
from verl_lite.reward.naive import NaiveRewardManager, RewardError, function_name
from verl_lite.reward.prime import PrimeRewardManager
from verl_lite.reward.scorers import BATCH_CALL, VERL_CALL
from verl_lite.utils.scores import short_repr

REWARD_MANAGERS = Registry("reward manager", "reward_model.reward_manager")
REWARD_MANAGERS.register("naive")(NaiveRewardManager)
REWARD_MANAGERS.register("prime")(PrimeRewardManager)
KWARGS = "reward_model.reward_kwargs"


@dataclass(frozen=True)
class OverlongBufferConfig:
    enable: bool = False  # apply the penalty
    len: int = 0  # tokens before max_resp_len where the penalty ramps from 0 to penalty_factor
    penalty_factor: float = 1.0  # penalty at max_resp_len
    log: bool = False  # report overlong_reward and overlong per response (reward_extra/* metrics)

    @classmethod
    def of(cls, raw: dict | None) -> OverlongBufferConfig:
        raw = dict(raw or {})
        unknown = sorted(set(raw) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(
                f"{KWARGS}.overlong_buffer_cfg: unknown keys {unknown}; known: {[f.name for f in fields(cls)]}"
            )
        return cls(**raw)


@REWARD_MANAGERS.register("dapo")
class DAPORewardManager(NaiveRewardManager):
    def __init__(
        self,
        tokenizer,
        compute_score: Callable,
        reward_fn_key: str = "data_source",
        num_examine: int = 0,
        max_resp_len: int | None = None,
        overlong_buffer_cfg: dict | None = None,
    ):
        super().__init__(tokenizer, compute_score, reward_fn_key, num_examine)
        self.buffer = OverlongBufferConfig.of(overlong_buffer_cfg)
        self.max_resp_len = max_resp_len
        if self.buffer.enable:
            self._check()

    def _check(self) -> None:
        b, key = self.buffer, f"{KWARGS}.overlong_buffer_cfg"
        if b.len <= 0:
            raise ValueError(f"{key}.len={b.len} must be > 0 when enable=True")
        if self.max_resp_len is None or self.max_resp_len < b.len:
            raise ValueError(
                f"{KWARGS}.max_resp_len={self.max_resp_len} must be set and >= {key}.len={b.len}"
            )
        if b.penalty_factor < 0:
            raise ValueError(f"{key}.penalty_factor={b.penalty_factor} must be >= 0")

    plain_score_as_acc = True  # the task score before the penalty, as verl logs it

    def shape(self, score: float, length: int, details: dict) -> float:
        if not self.buffer.enable:
            return score
        b = self.buffer
        exceed = length - (self.max_resp_len - b.len)
        penalty = min(-exceed / b.len * b.penalty_factor, 0.0)
        if b.log:
            details["overlong_reward"] = penalty
            details["overlong"] = float(penalty < 0)
        return score + penalty


@REWARD_MANAGERS.register("gdpo")
class GDPORewardManager(NaiveRewardManager):
    plain_score_as_acc = True

    def extra_info(self, non_tensor_batch: dict, i: int) -> dict:
        # verl's gdpo manager hands the scorer trainer.experiment_name (its rlla.py scorer reads the
        # model family from it)
        return {**super().extra_info(non_tensor_batch, i), "experiment_name": self.experiment_name}


@REWARD_MANAGERS.register("batch")
class BatchRewardManager(NaiveRewardManager):
    """verl's batch manager: the reward function is called once per batch, by keyword, with a list
    under each of BATCH_CALL's names and reward_model.reward_kwargs, and returns one result per row
    (a number, or a dict with "score", whose keys are kept as for the other managers)."""

    call = BATCH_CALL

    def __init__(
        self, tokenizer, compute_score: Callable, reward_fn_key="data_source", num_examine=0, **kwargs
    ):
        super().__init__(tokenizer, compute_score, reward_fn_key, num_examine)
        self.reward_kwargs = kwargs  # verl passes them to every call

    def _call_all(self, data, rows: list[tuple[int, dict]], progress: dict) -> list:
        progress["row"] = None
        calls = [call for _, call in rows]
        name, where = function_name(self.compute_score), f"the batch's {len(rows)} rows"
        lists = {plural: [c[key] for c in calls] for key, plural in zip(VERL_CALL, BATCH_CALL, strict=True)}
        with self._guard(where):
            results = self.compute_score(**lists, **self.reward_kwargs)
            if inspect.isawaitable(results):
                results = asyncio.run(results)
        if not isinstance(results, (list, tuple)) or len(results) != len(rows):
            raise RewardError(
                f"reward function {name} returned {short_repr(results)} for {where}; reward_manager.name=batch "
                f"needs one score (a number or a dict with a numeric 'score') per row, {len(rows)} in a list"
            )
        return list(results)


def build_reward_manager(
    name: str,
    tokenizer,
    compute_score: Callable,
    reward_fn_key: str = "data_source",
    num_examine: int = 0,
    reward_kwargs: dict | None = None,
    max_response_length: int | None = None,
    timeout: float | None = None,
    locate: Callable[[int], str] | None = None,
    experiment_name: str = "",
) -> NaiveRewardManager:
    """The manager `name` with its `reward_kwargs`; dapo's max_resp_len defaults to max_response_length.
    `timeout` (reward_model.timeout) bounds the scoring of one batch; `locate` names a sample's file
    and row in error messages; `experiment_name` (trainer.experiment_name) is what gdpo tells the scorer."""
    cls = REWARD_MANAGERS.get(name)
    kwargs = dict(reward_kwargs or {})
    if cls is DAPORewardManager:
        kwargs.setdefault("max_resp_len", max_response_length)
    fixed = {"self", "tokenizer", "compute_score", "reward_fn_key", "num_examine"}
    parameters = inspect.signature(cls.__init__).parameters
    allowed = set(parameters) - fixed
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())  # batch's
    unknown = [] if takes_any else sorted(set(kwargs) - allowed)
    if unknown:
        raise ValueError(
            f"{KWARGS} has keys {unknown} that reward_model.reward_manager={name!r} does not take "
            f"(it takes {sorted(allowed) or 'none'})"
        )
    manager = cls(tokenizer, compute_score, reward_fn_key, num_examine, **kwargs)
    manager.timeout, manager.locate, manager.experiment_name = timeout, locate, experiment_name
    return manager
