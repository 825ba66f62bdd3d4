"""The engine server's entry under the module path `lantern engine serve` loads (gateway/cli.py).

The server itself is `selfhost.serve.server`; this module only names its `main`.
"""

from selfhost.serve.server import main

__all__ = ["main"]
