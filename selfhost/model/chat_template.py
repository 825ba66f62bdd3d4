"""Chat templates (HF/GGUF jinja2 strings) rendered in a sandboxed jinja2 environment."""

from __future__ import annotations

from typing import Any

from jinja2 import meta
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateError(ValueError):
    """The chat template called raise_exception() or failed to render."""


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


class ChatTemplate:
    """`renders_tools`: the template reads a `tools` variable (the model was trained with tools)."""

    def __init__(self, source: str) -> None:
        self.source = source
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
        )
        env.globals["raise_exception"] = _raise_exception
        self._template = env.from_string(source)
        self.renders_tools = "tools" in meta.find_undeclared_variables(env.parse(source))

    def render(
        self,
        messages: list[dict[str, Any]],
        bos_token: str = "",
        eos_token: str = "",
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
    ) -> str:
        """`tools` (OpenAI tool objects) reach the template only when given: templates test
        `tools is defined` as often as `tools`."""
        extra = {} if tools is None else {"tools": tools}
        return self._template.render(
            messages=messages,
            bos_token=bos_token,
            eos_token=eos_token,
            add_generation_prompt=add_generation_prompt,
            **extra,
        )
