"""Hugging Face checkpoints on disk: config.json, *.safetensors shards, optional tokenizer files."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from recipe.engine.models.weights import CheckpointError
from safetensors import safe_open


class SafetensorsCheckpoint(Mapping[str, torch.Tensor]):
    """Every tensor of a checkpoint folder by name, read from its shard only when asked for."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        files = sorted(self.folder.glob("*.safetensors"))
        if not files:
            raise CheckpointError(f"no *.safetensors files in {self.folder}")
        self._handles = [safe_open(str(f), framework="pt") for f in files]
        self._where: dict[str, int] = {}
        for i, h in enumerate(self._handles):
            for name in h.keys():  # noqa: SIM118  (safe_open handles are not iterable)
                self._where[name] = i

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._handles[self._where[name]].get_tensor(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} not found: a checkpoint folder needs config.json") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} must hold a JSON object")
    return data


def eos_ids(config: Mapping[str, Any], generation_config: Mapping[str, Any]) -> tuple[int, ...]:
    """End-of-sequence ids: generation_config.json's list when present, else config.json's."""
    value = generation_config.get("eos_token_id", config.get("eos_token_id"))
    if value is None:
        return ()
    return tuple(int(v) for v in value) if isinstance(value, list) else (int(value),)


def read_folder(folder: str | Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(config.json, generation_config.json or {}, tokenizer.json text or "")."""
    root = Path(folder)
    config = read_json(root / "config.json")
    gen_path = root / "generation_config.json"
    generation = read_json(gen_path) if gen_path.exists() else {}
    tok_path = root / "tokenizer.json"
    tokenizer_json = tok_path.read_text(encoding="utf-8") if tok_path.exists() else ""
    return config, generation, tokenizer_json
