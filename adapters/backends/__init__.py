"""Backends: turn a canonical call into an upstream call. `build_backend` is the one factory."""

from __future__ import annotations

from adapters.backends.factory import build_backend
from adapters.backends.spec import BackendKind, BackendSpec

__all__ = ["BackendKind", "BackendSpec", "build_backend"]
