"""The base every policy model derives from: frozen, strict about unknown keys."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class PolicyModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)
