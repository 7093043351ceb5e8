"""Entry point: argument parsing, logging set-up, and the one place user errors become exit codes.

Each subcommand lives in its own ``perception/cli/_<name>.py`` module exposing
``register(subparsers) -> None``; the parser it adds sets ``func=run`` where
``run(args) -> int``. Errors derived from :class:`perception.errors.PerceptionError` are printed as
one line on stderr (no traceback): exit code 2 for configuration/usage errors, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from perception import __version__
from perception.errors import ConfigError, PerceptionError

__all__ = ["build_parser", "main"]

log = logging.getLogger("perception")

#: Subcommand modules, in the order ``--help`` lists them.
COMMANDS: tuple[str, ...] = (
    "perception.cli._server",
    "perception.cli._config",
    "perception.cli._sim",
    "perception.cli._info",
    "perception.cli._import",
    "perception.cli._replay",
    "perception.cli._eval",
    "perception.cli._budget",
    "perception.cli._bench",
    "perception.cli._model_quality",
    "perception.cli._render",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perception",
        description="Multi-sensor perception fusion runtime on NVIDIA Triton.",
    )
    parser.add_argument("--version", action="version", version=f"perception {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMANDS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # command not built yet
                continue
            raise
        module.register(sub)
    return parser


def _setup_logging(verbose: int, quiet: bool) -> None:
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 1 else logging.INFO)
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    if verbose < 2:
        for noisy in ("matplotlib", "PIL", "asyncio"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    _setup_logging(args.verbose, args.quiet)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        sys.stderr.write(f"perception {args.command}: error: {exc}\n")
        return 2
    except PerceptionError as exc:
        sys.stderr.write(f"perception {args.command}: error: {exc}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write(f"perception {args.command}: interrupted\n")
        return 130
