"""The wire formats clients and upstreams speak, one package each with the same file names:
`openai/` (chat completions), `anthropic/` (messages) and `responses/` (OpenAI's Responses API).

Each package's `__init__` is its one import; `request`, `response`, `stream` and `relay` do the
same job in each. Pure functions and small stateful codecs at the JSON edge; no I/O.
"""
