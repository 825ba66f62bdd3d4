"""The `lantern` command: argument parsing and dispatch only.

Each command's work lives elsewhere (app, reports, cache explain, the engine); those modules
are imported lazily so `lantern policy check` never pays for FastAPI or torch.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gateway.cli.demo import announce_demo
from gateway.keys import new_key
from gateway.settings import Settings, SettingsError, demo_settings, load_settings
from policies.loader import check_paths, reference_issues

EXIT_OK, EXIT_INVALID, EXIT_UNAVAILABLE = 0, 1, 2
GROUP_BY_CHOICES = ("tenant", "model", "backend", "day", "key", "session", "month", "door")
_TENANT_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, unknown = parser.parse_known_args(args_list)
    if unknown and args.handler is not _engine_serve:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.handler is _engine_serve:
        return _engine_serve(_after(args_list, "engine", "serve"))
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lantern", description="Agent-serving gateway and prompt-cache middleware."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_serve(commands)
    _add_policy(commands)
    _add_keys(commands)
    _add_report(commands)
    _add_cache(commands)
    _add_engine(commands)
    return parser


def _add_serve(commands: Any) -> None:
    serve = commands.add_parser("serve", help="run the gateway", description="Run the gateway.")
    source = serve.add_mutually_exclusive_group()
    source.add_argument("--config", type=Path, help="lantern.yaml (default: $LANTERN_CONFIG)")
    source.add_argument(
        "--demo",
        action="store_true",
        help="embedded defaults: bundled engine with SmolLM2 on CPU and a seeded `demo` tenant",
    )
    serve.add_argument("--host", help="listen address (overrides the config)")
    serve.add_argument("--port", type=int, help="listen port (overrides the config)")
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="gateway processes sharing the port (SO_REUSEPORT; one per core; "
        "share decisions through redis_url)",
    )
    serve.set_defaults(handler=_serve)


def _add_policy(commands: Any) -> None:
    policy = commands.add_parser("policy", help="tenant policy files", description="Policy files.")
    actions = policy.add_subparsers(dest="action", required=True, metavar="ACTION")
    check = actions.add_parser(
        "check",
        help="validate policy files",
        description="Validate policy files and directories; print file:line: field: reason "
        "for every error (exit 1), or one OK line (exit 0).",
    )
    check.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="file or directory")
    check.add_argument(
        "--config",
        type=Path,
        help="also check that `models`, `backends` and `mcp_servers` name entries of this "
        "lantern.yaml",
    )
    check.set_defaults(handler=_policy_check)


def _add_keys(commands: Any) -> None:
    keys = commands.add_parser("keys", help="tenant API keys", description="Tenant API keys.")
    actions = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser(
        "create",
        help="generate a key",
        description="Print a new API key once, and the api_keys entry to paste into the "
        "tenant's policy file (Lantern stores only the key's sha256).",
    )
    create.add_argument("--tenant", required=True, help="tenant id (the policy file's name)")
    create.add_argument("--id", dest="key_id", help="key id (default: k + 8 random hex digits)")
    create.set_defaults(handler=_keys_create)


def _add_report(commands: Any) -> None:
    report = commands.add_parser("report", help="usage reports", description="Usage reports.")
    kinds = report.add_subparsers(dest="report", required=True, metavar="REPORT")
    cost = kinds.add_parser("cost", help="spend by group", description="Spend by group.")
    _add_window(cost, ("table", "csv", "json", "focus"))
    cost.add_argument(
        "--group-by",
        action="append",
        metavar="|".join(GROUP_BY_CHOICES),
        help="grouping key, repeatable or comma-separated (default: the report's own)",
    )
    cost.set_defaults(handler=_report_cost)
    breakeven = kinds.add_parser(
        "breakeven",
        help="self-host vs API break-even",
        description="Break-even utilisation of self-hosted replicas against API prices.",
    )
    _add_window(breakeven)
    breakeven.add_argument("--model", help="only this model (default: every model with a fleet)")
    breakeven.add_argument(
        "--mtok-per-h",
        dest="mtok_per_h",
        type=float,
        help="million work tokens one replica serves per hour at full use "
        "(default: capacity_tok_s in lantern.yaml, else the busiest hour served)",
    )
    breakeven.add_argument(
        "--headroom", type=float, help="target utilisation of a replica, in (0, 1] (default 0.65)"
    )
    breakeven.set_defaults(handler=_report_breakeven)
    pnl = kinds.add_parser(
        "cache-pnl",
        help="prompt cache profit and loss",
        description="Money saved by cache reads, write premiums, money lost per break cause.",
    )
    _add_window(pnl)
    pnl.add_argument("--tenant", help="one tenant only")
    pnl.set_defaults(handler=_report_cache_pnl)


def _add_window(
    parser: argparse.ArgumentParser, formats: tuple[str, ...] = ("table", "csv", "json")
) -> None:
    parser.add_argument(
        "--since",
        help="start: ISO date or datetime, UTC unless offset given "
        "(default: month to date, from midnight UTC on the 1st of this month)",
    )
    parser.add_argument(
        "--until", help="end: ISO datetime (exclusive) or date (whole day); default: now"
    )
    parser.add_argument(
        "--format",
        choices=formats,
        default="table",
        help=f"{'|'.join(formats)}; every format carries the period and totals",
    )
    _add_config(parser)


def _add_config(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--config", type=Path, help="lantern.yaml (default: $LANTERN_CONFIG)")
    source.add_argument(
        "--demo", action="store_true", help="the settings of `lantern serve --demo` (make run)"
    )


def _add_cache(commands: Any) -> None:
    cache = commands.add_parser("cache", help="prompt cache", description="Prompt cache tools.")
    actions = cache.add_subparsers(dest="action", required=True, metavar="ACTION")
    explain = actions.add_parser(
        "explain",
        help="why a session's cache broke",
        description="Explain where and why a session's prompt prefix changed.",
    )
    explain.add_argument("--session", required=True, help="session id")
    explain.add_argument(
        "--tenant", help="tenant id (needed only when several tenants used this session id)"
    )
    _add_config(explain)
    explain.set_defaults(handler=_cache_explain)


def _add_engine(commands: Any) -> None:
    engine = commands.add_parser("engine", help="bundled engine", description="Bundled engine.")
    actions = engine.add_subparsers(dest="action", required=True, metavar="ACTION")
    serve = actions.add_parser(
        "serve",
        help="run the bundled engine",
        description="Run the bundled OpenAI-compatible engine; arguments pass through to it.",
    )
    serve.add_argument("--model", metavar="PATH|default", help="GGUF/safetensors or `default`")
    serve.add_argument("--host", help="listen address")
    serve.add_argument("--port", type=int, help="listen port")
    serve.add_argument("--device", choices=("cpu", "cuda"), help="device")
    serve.add_argument("--dtype", help="weights/activations dtype, e.g. float32, bfloat16")
    serve.set_defaults(handler=_engine_serve)


def _after(argv: list[str], *words: str) -> list[str]:
    """The arguments that follow the command words (`engine serve ...` → `...`)."""
    position = 0
    for word in words:
        position = argv.index(word, position) + 1
    return argv[position:]


def _lazy(module: str, attribute: str, command: str) -> Callable[..., Any] | None:
    """Import `module.attribute`, or say clearly that this build lacks it."""
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):
            raise  # a real bug inside the module: do not hide it
        loaded = None
    function = getattr(loaded, attribute, None)
    if function is None:
        print(
            f"lantern {command}: not available ({module}.{attribute} is missing)", file=sys.stderr
        )
    return function


def _settings(config: Path | None, **overrides: Any) -> Settings | None:
    try:
        return load_settings(config, **overrides)
    except SettingsError as exc:
        for issue in exc.issues:
            print(issue, file=sys.stderr)
        return None


def _serve(args: argparse.Namespace) -> int:
    try:
        if args.demo:
            settings = demo_settings(host=args.host, port=args.port)
        else:
            settings = load_settings(args.config, host=args.host, port=args.port)
    except SettingsError as exc:
        for issue in exc.issues:
            print(issue, file=sys.stderr)
        return EXIT_UNAVAILABLE
    if args.demo:
        settings = announce_demo(settings, host=args.host, port=args.port)
    if args.workers < 1:
        print("--workers: at least 1", file=sys.stderr)
        return EXIT_INVALID
    serve = _lazy("gateway.app", "serve", "serve")
    if serve is None:
        return EXIT_UNAVAILABLE
    try:
        result = serve(settings, args.workers)
    except ValueError as exc:  # WorkersRefused: a configuration N processes cannot share
        print(f"lantern serve: {exc}", file=sys.stderr)
        return EXIT_INVALID
    return result if isinstance(result, int) else EXIT_OK


def _policy_check(args: argparse.Namespace) -> int:
    loaded, issues = check_paths(args.paths)
    if args.config is not None:
        settings = _settings(args.config)
        if settings is None:
            return EXIT_UNAVAILABLE
        models = {route.name for route in settings.models}
        backends = {b.name for route in settings.models for b in route.backends}
        servers = {server.name for server in settings.mcp_servers}
        for item in loaded:
            issues.extend(reference_issues(item, models, backends, servers))
    elif any(item.policy.mcp_servers for item in loaded):
        print(
            "lantern policy check: warning: mcp_servers grants not checked against the "
            "declared servers (pass --config lantern.yaml)",
            file=sys.stderr,
        )
    for issue in sorted(issues):
        print(issue)
    if issues:
        files = len({issue.file for issue in issues})
        print(f"lantern policy check: {len(issues)} error(s) in {files} file(s)", file=sys.stderr)
        return EXIT_INVALID
    if not loaded:
        print("lantern policy check: no policy files found", file=sys.stderr)
        return EXIT_INVALID
    keys = sum(len(item.policy.api_keys) for item in loaded)
    print(f"OK: {len(loaded)} policy file(s), {keys} API key(s)")
    return EXIT_OK


def _keys_create(args: argparse.Namespace) -> int:
    if not _TENANT_ID.fullmatch(args.tenant):
        print(
            f"lantern keys create: invalid tenant id {args.tenant!r}: use 1-63 lowercase "
            "letters, digits, '_' or '-', starting with a letter or digit (e.g. acme)",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    if args.key_id is not None and not _KEY_ID.fullmatch(args.key_id):
        print(
            f"lantern keys create: invalid key id {args.key_id!r}: use 1-64 letters, digits, "
            "'_', '.' or '-', starting with a letter or digit",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    key = new_key(args.key_id)
    print(f"API key for tenant {args.tenant} (shown once; Lantern stores only its sha256):")
    print(f"  {key.key}")
    print(f"Add this entry under `api_keys:` in {args.tenant}.yaml:")
    print(f"  {key.yaml_entry()}")
    return EXIT_OK


def _with_settings(module: str, attribute: str, command: str, args: argparse.Namespace) -> int:
    function = _lazy(module, attribute, command)
    if function is None:
        return EXIT_UNAVAILABLE
    if getattr(args, "demo", False):
        try:
            settings: Settings | None = demo_settings()
        except SettingsError as exc:
            for issue in exc.issues:
                print(issue, file=sys.stderr)
            return EXIT_UNAVAILABLE
    else:
        settings = _settings(args.config)
    if settings is None:
        return EXIT_UNAVAILABLE
    return int(function(args, settings))


def _report_cost(args: argparse.Namespace) -> int:
    return _with_settings("gateway.reports.cost", "cli_cost", "report cost", args)


def _report_breakeven(args: argparse.Namespace) -> int:
    return _with_settings("gateway.reports.cost", "cli_breakeven", "report breakeven", args)


def _report_cache_pnl(args: argparse.Namespace) -> int:
    return _with_settings("gateway.reports.cache_pnl", "cli_cache_pnl", "report cache-pnl", args)


def _cache_explain(args: argparse.Namespace) -> int:
    return _with_settings("gateway.cli.cache_explain", "cli_explain", "cache explain", args)


def _engine_serve(argv: list[str]) -> int:
    # libgomp reads this once, when torch loads: spinning OpenMP threads starve shared cores
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    engine_main = _lazy("selfhost.serve.server", "main", "engine serve")
    if engine_main is None:
        return EXIT_UNAVAILABLE
    return int(engine_main(argv))


if __name__ == "__main__":
    raise SystemExit(main())
