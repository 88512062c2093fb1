"""The RLHF prompt dataset in verl's parquet layout.

Columns: data_source, prompt (chat messages), ability, reward_model {ground_truth, ...}, extra_info.
Prompts go through the tokenizer's chat template with the generation prompt appended, are checked
against max_prompt_length (error, truncate left or right, or filtered at load and counted), and are
left-padded so every batch is a rectangle whose last column is the last prompt token.
Everything is tokenized and checked at load, so a bad row (no chat messages, an empty prompt, no
data_source, no reward_model.ground_truth) fails before any worker starts, naming file, row and key.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import jinja2
import numpy as np
import pandas as pd
import torch

from verl_lite.config.schema_trainer import TRUNCATIONS
from verl_lite.data.files import locate_invalid_utf8, lost_characters
from verl_lite.protocol import DataProto

log = logging.getLogger(__name__)
TOKENIZE_CHUNK = 4096  # rows tokenized per batch call: the batch's speed, a bounded copy of the texts


def _chunks(items: list, size: int):
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass(frozen=True)
class PromptSpec:
    """What the dataset needs from the data config."""

    prompt_key: str = "prompt"
    reward_fn_key: str = "data_source"
    max_prompt_length: int = 512
    truncation: str = "error"
    filter_overlong_prompts: bool = False
    return_raw_chat: bool = False
    require_ground_truth: bool = True  # rule-based rewards need reward_model.ground_truth in every row
    max_samples: int = -1  # data.train_max_samples / val_max_samples: use this many rows; -1: all
    shuffle: bool = False  # data.shuffle: max_samples picks a random subset (by seed), else the first rows
    seed: int | None = None  # data.seed of that subset; null: a fixed default
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)  # data.apply_chat_template_kwargs
    tools: tuple[dict, ...] | None = None  # data.tool_config_path's schemas: rendered by the chat template


def _subset(frame: pd.DataFrame, spec: PromptSpec) -> pd.DataFrame:
    """verl's max_samples: a random subset of the rows with data.shuffle, else the first rows."""
    total = len(frame)
    if spec.max_samples <= 0 or spec.max_samples >= total:
        return frame
    if spec.shuffle:
        rng = np.random.default_rng(0 if spec.seed is None else spec.seed)
        rows = np.sort(rng.choice(total, size=spec.max_samples, replace=False))
    else:
        rows = np.arange(spec.max_samples)
    log.info("max_samples=%d: using %d of %d rows", spec.max_samples, spec.max_samples, total)
    return frame.iloc[rows].reset_index(drop=True)


def _read(files) -> pd.DataFrame:
    files = [files] if isinstance(files, str) else list(files)
    frames = []
    for f in files:
        try:
            frame = pd.read_parquet(f)
        except Exception as e:  # pyarrow raises several types for a corrupt or missing file
            raise ValueError(_read_error(f, e)) from e
        if frame.empty:
            raise ValueError(f"{f}: the parquet file holds no rows; fill it or leave it out")
        frame["__file__"] = f
        frame["__row__"] = range(len(frame))  # the row's index in its own file, for error messages
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def _read_error(path: str, error: Exception) -> str:
    """What pandas could not read, named by file (and column and row for text that is not UTF-8)."""
    try:
        bad = locate_invalid_utf8(path)
    except Exception:  # the file is not readable at all: pandas' own message says why
        bad = None
    if bad is not None:
        column, row = bad
        return (
            f"{path} row {row}: column '{column}' holds text that is not valid UTF-8; "
            "re-encode the text as UTF-8 (e.g. bytes.decode('latin-1')) and write the file again"
        )
    return f"cannot read parquet file {path!r}: {' '.join(str(error).split())}"


def _messages(value, where: str, key: str) -> list[dict]:
    """The row's chat messages; anything but a non-empty list of {role, content} strings is an error."""
    fix = f"store column '{key}' as chat messages, e.g. [{{'role': 'user', 'content': '...'}}]"
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__len__"):
        raise ValueError(f"{where}: column '{key}' must be a list of chat messages, got {value!r}; {fix}")
    messages = []
    for m in value:
        if (
            not isinstance(m, dict)
            or not isinstance(m.get("role"), str)
            or not isinstance(m.get("content"), str)
        ):
            raise ValueError(f"{where}: column '{key}' holds {m!r}, not a {{role, content}} message; {fix}")
        messages.append(dict(m))
    if not messages:
        raise ValueError(f"{where}: column '{key}' holds no messages; {fix}")
    if not any(m["content"].strip() for m in messages):
        raise ValueError(f"{where}: column '{key}' holds an empty prompt")
    return messages


def _check_row(row: dict, where: str, spec: PromptSpec) -> None:
    """The reward side of a row: a data_source to pick the scorer, a ground truth to score against."""
    source = row[spec.reward_fn_key]
    if not isinstance(source, str) or not source:
        raise ValueError(f"{where}: column '{spec.reward_fn_key}' must name the data source, got {source!r}")
    if not spec.require_ground_truth:
        return
    reward_model = row.get("reward_model")
    if not isinstance(reward_model, dict) or reward_model.get("ground_truth") is None:
        raise ValueError(
            f"{where} (data_source={source!r}): no reward_model.ground_truth, got reward_model={reward_model!r}; "
            "rule-based rewards score against it: add {'ground_truth': ...} to every row's reward_model column"
        )


def _check_representable(text: str, decoded: str, where: str, key: str) -> None:
    """Text the tokenizer cannot represent would silently vanish from the prompt: an error instead."""
    lost = lost_characters(text, decoded)
    if lost:
        shown = ", ".join(repr(c) for c in lost[:8]) + (", ..." if len(lost) > 8 else "")
        raise ValueError(
            f"{where}: column '{key}' has characters the tokenizer cannot represent ({shown}); they would be "
            "dropped from the prompt. Remove them from the data or use a tokenizer that covers them"
        )


def _render(tokenizer, messages: list[dict], where: str, spec: PromptSpec) -> str:
    """The prompt text of a row's messages; a template that fails (Jinja's sandbox refusing an
    attribute, an undefined variable, the template's own raise_exception) is named in one line."""
    tools = {"tools": [dict(t) for t in spec.tools]} if spec.tools else {}
    try:
        return tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, **tools, **spec.chat_template_kwargs
        )
    except jinja2.TemplateError as e:
        source = getattr(tokenizer, "name_or_path", "") or "the tokenizer"
        raise ValueError(
            f"{where}: the chat template of {source} fails on this row: {type(e).__name__}: "
            f"{' '.join(str(e).split())[:300]}; fix the template (chat_template.jinja or tokenizer_config.json's "
            "chat_template) or set actor_rollout_ref.model.custom_chat_template"
        ) from e


class RLHFDataset:
    def __init__(self, files, tokenizer, spec: PromptSpec):
        if spec.truncation not in TRUNCATIONS:
            raise ValueError(f"data.truncation={spec.truncation!r} must be one of {TRUNCATIONS}")
        self.tokenizer, self.spec = tokenizer, spec
        self.files = [files] if isinstance(files, str) else list(files)
        frame = _subset(_read(files), spec)
        for column in (spec.prompt_key, spec.reward_fn_key):
            if column not in frame.columns:
                raise ValueError(
                    f"{list(dict.fromkeys(frame['__file__']))}: no column '{column}' "
                    f"(columns: {[c for c in frame.columns if not c.startswith('__')]}); "
                    "set data.prompt_key / data.reward_fn_key or fix the files"
                )
        self.rows: list[dict] = []
        self.prompts: list[list[int]] = []
        self.num_filtered = 0
        for chunk in _chunks(frame.to_dict("records"), TOKENIZE_CHUNK):
            self._add(chunk)
        if self.num_filtered:
            log.warning("filter_overlong_prompts dropped %d of %d prompts", self.num_filtered, len(frame))
        if not self.rows:
            raise ValueError(
                f"{self.files}: all {self.num_filtered} prompts are over data.max_prompt_length="
                f"{spec.max_prompt_length} and were dropped by data.filter_overlong_prompts=True; "
                "raise data.max_prompt_length or set data.truncation=left|right"
            )

    def _add(self, rows: list[dict]) -> None:
        """Rows in file order: rendered, then tokenized and decoded as one batch (the tokenizer's batch
        call: one pass of its Rust code instead of one per row), then checked in order. The error
        raised is the one a row-by-row loop would raise: the rows after the first that cannot be
        rendered are left for later, and that row's error comes after the checks of the rows before it."""
        spec, tokenizer = self.spec, self.tokenizer
        ready, pending = [], None  # (row, where, messages, text) rendered; the first row's error
        for row in rows:
            where = f"{row['__file__']} row {row['__row__']}"
            try:
                messages = _messages(row[spec.prompt_key], where, spec.prompt_key)
                _check_row(row, where, spec)
                ready.append((row, where, messages, _render(tokenizer, messages, where, spec)))
            except Exception as e:  # noqa: BLE001 - raised below, after the rows before it are checked
                pending = e
                break
        texts = [text for *_, text in ready]
        encoded = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        decoded = tokenizer.batch_decode(encoded, skip_special_tokens=False)
        for (row, where, messages, text), ids, back in zip(ready, encoded, decoded):
            _check_representable(text, back, where, spec.prompt_key)
            ids = self._fit(ids, where)
            if ids is None:
                self.num_filtered += 1
                continue
            row["__messages__"] = messages
            self.rows.append(row)
            self.prompts.append(ids)
        if pending is not None:
            raise pending

    def _fit(self, ids: list[int], where: str) -> list[int] | None:
        limit = self.spec.max_prompt_length
        if len(ids) <= limit:
            return ids
        if self.spec.filter_overlong_prompts:
            return None
        if self.spec.truncation == "left":
            return ids[-limit:]
        if self.spec.truncation == "right":
            return ids[:limit]
        raise ValueError(
            f"{where}: prompt is {len(ids)} tokens, over data.max_prompt_length={limit}. "
            "Raise data.max_prompt_length, set data.truncation=left|right, or data.filter_overlong_prompts=True"
        )

    def __len__(self) -> int:
        return len(self.rows)

    def where(self, index: int) -> str:
        """`file row N` of the dataset's prompt `index`, for messages."""
        row = self.rows[index]
        return f"{row['__file__']} row {row['__row__']}"

    def collate(self, indices) -> DataProto:
        """Left-padded prompt tensors plus the rows' non-tensor fields, as one DataProto."""
        width, pad = self.spec.max_prompt_length, self.tokenizer.pad_token_id
        input_ids = torch.full((len(indices), width), pad, dtype=torch.long)
        attention_mask = torch.zeros((len(indices), width), dtype=torch.long)
        for r, i in enumerate(indices):
            ids = self.prompts[i]
            input_ids[r, width - len(ids) :] = torch.tensor(ids)
            attention_mask[r, width - len(ids) :] = 1
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        rows = [self.rows[i] for i in indices]
        non_tensors = {
            "data_source": [r[self.spec.reward_fn_key] for r in rows],
            "reward_model": [dict(r.get("reward_model") or {}) for r in rows],
            "extra_info": [dict(r.get("extra_info") or {}) for r in rows],
            "index": [verl_index(r) for r in rows],  # verl's: extra_info.index (0 when absent)
            DATASET_INDEX: list(indices),  # the rows' positions in this dataset (verl_lite's own)
        }
        if self.spec.return_raw_chat:
            non_tensors["raw_prompt"] = [r["__messages__"] for r in rows]
        if self.has_agent_fields:
            non_tensors.update({k: [agent_field(r, k) for r in rows] for k in AGENT_FIELDS})
        tensors = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
        return DataProto.from_dict(tensors, non_tensors)

    @property
    def has_agent_fields(self) -> bool:
        """The data names agent loops or carries tool / interaction arguments (agent_field)."""
        if not hasattr(self, "_has_agent_fields"):
            self._has_agent_fields = any(
                agent_field(r, "agent_name") is not None
                or agent_field(r, "tools_kwargs")
                or agent_field(r, "interaction_kwargs")
                for r in self.rows
            )
        return self._has_agent_fields

    def messages(self, indices) -> list[list[dict]]:
        """The chat messages of the rows `indices` (an agent loop's conversation starts with them)."""
        return [self.rows[int(i)]["__messages__"] for i in indices]

    def loop_rows(self, indices) -> dict[str, list]:
        """What verl's RLHFDataset.__getitem__ gives an agent loop for the rows `indices`, by field:
        every column of the file (the prompt's too; not verl_lite's own `__` ones), `raw_prompt`, and
        from extra_info `index` (0 when absent), `tools_kwargs` and `interaction_kwargs` ({} when absent)."""
        rows = [self.rows[int(i)] for i in indices]
        columns = dict.fromkeys(k for r in rows for k in r if not k.startswith("__"))
        fields = {k: [r.get(k) for r in rows] for k in columns}
        fields["extra_info"] = [dict(r.get("extra_info") or {}) for r in rows]
        fields["raw_prompt"] = [r["__messages__"] for r in rows]
        fields["index"] = [verl_index(r) for r in rows]
        for key in ("tools_kwargs", "interaction_kwargs"):
            fields[key] = [agent_field(r, key) for r in rows]
        return fields


AGENT_FIELDS = ("agent_name", "tools_kwargs", "interaction_kwargs")
DATASET_INDEX = "dataset_index"  # a batch's field: each row's position in its dataset


def verl_index(row: dict):
    """verl's `index` of a row: its extra_info.index, 0 when it has none (rl_dataset.py __getitem__)."""
    info = row.get("extra_info")
    return info.get("index", 0) if isinstance(info, dict) else 0


def agent_field(row: dict, key: str):
    """What verl's dataset hands an agent loop: the row's `agent_name` column (None when absent), and
    extra_info's `tools_kwargs` and `interaction_kwargs` ({} when absent). Parquet gives a row the
    union of every row's struct fields, so tools named only in other rows come back as None: those
    are left out."""
    if key == "agent_name":
        value = row.get("agent_name")
        return value if isinstance(value, str) else None
    value = (row.get("extra_info") or {}).get(key) or {}
    if not isinstance(value, dict):
        return value  # not a mapping: data/checks.py names the row
    if key == "tools_kwargs":
        return {
            name: {k: v for k, v in (kw or {}).items() if v is not None}
            for name, kw in value.items()
            if kw is not None
        }
    return dict(value)


def check_batch_fits(dataset: RLHFDataset, batch_size: int, key: str, files_key: str) -> str | None:
    """A batch (drop_last) larger than the dataset would give no step at all: one line naming both."""
    if batch_size <= len(dataset):
        return None
    dropped = (
        f" ({dataset.num_filtered} more dropped by data.filter_overlong_prompts)"
        if dataset.num_filtered
        else ""
    )
    return (
        f"{key}={batch_size} is larger than the {len(dataset)} prompts of {files_key}={dataset.files}{dropped}; "
        f"lower {key} or add data"
    )


class EpochSampler:
    """Batches of indices, reshuffled every epoch from (seed, epoch); its state is two integers."""

    def __init__(self, size: int, batch_size: int, shuffle: bool, seed: int | None, drop_last: bool = True):
        if batch_size > size and drop_last:
            raise ValueError(
                f"data.train_batch_size={batch_size} is larger than the training set ({size} prompts); "
                "lower it or add data"
            )
        self.size, self.batch_size, self.shuffle, self.seed, self.drop_last = (
            size,
            batch_size,
            shuffle,
            seed,
            drop_last,
        )
        self.epoch, self.offset = 0, 0

    def __len__(self) -> int:
        return self.size // self.batch_size if self.drop_last else -(-self.size // self.batch_size)

    def _order(self) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.size)
        entropy = [self.epoch] if self.seed is None else [self.seed, self.epoch]  # data.seed=null: fixed
        return np.random.default_rng(entropy).permutation(self.size)

    def epoch_batches(self):
        """The remaining batches of the current epoch; advances the state as it goes. Several
        iterators may share the sampler (DAPO draws extra batches mid-step): each continues from the
        shared offset, and one stops when another has moved the sampler into the next epoch."""
        epoch, order = self.epoch, self._order()
        end = len(self) * self.batch_size if self.drop_last else self.size
        while self.epoch == epoch and self.offset < end:
            batch = order[self.offset : self.offset + self.batch_size].tolist()
            self.offset += self.batch_size
            yield batch
        if self.epoch == epoch:
            self.epoch, self.offset = self.epoch + 1, 0

    def next_batch(self) -> list[int]:
        """The next batch: this epoch's next, else the next epoch's first (the sampler moves on)."""
        batch = next(self.epoch_batches(), None)
        return batch if batch is not None else next(self.epoch_batches())

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "offset": self.offset}

    def load_state_dict(self, state: dict) -> None:
        """A checkpoint's position; one past this dataset's end (a checkpoint of another, larger
        dataset) is refused: it would end the epoch at once, silently skipping the rest of it."""
        epoch, offset = int(state["epoch"]), int(state["offset"])
        end = len(self) * self.batch_size  # where the epoch's last batch leaves the offset
        if epoch < 0 or not 0 <= offset <= end:
            raise ValueError(
                f"the checkpoint's sampler position (epoch {epoch}, offset {offset}) is outside this run's "
                f"training data ({self.size} prompts): it was saved with other data.train_files; resume with "
                "the data it was saved with, or start afresh (trainer.resume_mode=disable)"
            )
        self.epoch, self.offset = epoch, offset
