"""Chat templates (HF/GGUF jinja2 strings) rendered in a sandboxed jinja2 environment."""

from __future__ import annotations

from typing import Any

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateError(ValueError):
    """The chat template called raise_exception() or failed to render."""


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


class ChatTemplate:
    def __init__(self, source: str) -> None:
        self.source = source
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
        )
        env.globals["raise_exception"] = _raise_exception
        self._template = env.from_string(source)

    def render(
        self,
        messages: list[dict[str, Any]],
        bos_token: str = "",
        eos_token: str = "",
        add_generation_prompt: bool = True,
    ) -> str:
        return self._template.render(
            messages=messages,
            bos_token=bos_token,
            eos_token=eos_token,
            add_generation_prompt=add_generation_prompt,
        )
