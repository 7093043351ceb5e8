"""Entry point: argument parsing, logging set-up, and the one place user errors become exit codes.

Each subcommand lives in its own ``perception/cli/_<name>.py`` module exposing
``register(subparsers) -> None``; the parser it adds sets ``func=run`` where
``run(args) -> int``. Errors derived from :class:`perception.errors.PerceptionError` are printed as
one line on stderr (no traceback): exit code 2 for configuration/usage errors, 3 for a damaged
drive (:class:`perception.errors.DriveDamagedError`), 1 otherwise (codes in ``_exitcodes``). Output whose
reader went away (``| head -1``) ends the command quietly.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import logging
import os
import select
import sys
from collections.abc import Sequence
from typing import NoReturn

from perception import __version__
from perception.cli._exitcodes import (
    EXIT_CODES_HELP,
    EXIT_DAMAGED,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OUTPUT_CLOSED,
    EXIT_USAGE,
)
from perception.errors import ConfigError, DriveDamagedError, PerceptionError

__all__ = ["build_parser", "main"]

log = logging.getLogger("perception")

#: Subcommands in ``--help`` order: name -> (module, one-line help). Only the chosen command's module
#: is imported, so ``perception --help`` and light commands start fast.
COMMANDS: dict[str, tuple[str, str]] = {
    "server": ("perception.cli._server", "start the embedded Triton server on a model repository"),
    "config": ("perception.cli._config", "validate a launch profile (YAML) and print it resolved"),
    "sim": ("perception.cli._sim", "generate a deterministic synthetic drive with ground truth"),
    "info": ("perception.cli._info", "summarize a recorded drive (MCAP)"),
    "import": ("perception.cli._import", "import a ROS 2 bag, a nuScenes scene or a KITTI-format tree into a drive"),
    "replay": ("perception.cli._replay", "replay a drive through Triton: one record per frame"),
    "eval": ("perception.cli._eval", "score detections vs ground truth in every sensor mode"),
    "fleet": ("perception.cli._fleet", "replay many drives on a Ray cluster: one report and one verdict"),
    "budget": ("perception.cli._budget", "latency-budget test with per-stage attribution and a verdict"),
    "live": ("perception.cli._live", "run the live API as a vehicle host would, with a publisher process"),
    "ros": ("perception.cli._ros", "the runtime as a ROS 2 lifecycle node; drives played as ROS 2 topics"),
    "bench": ("perception.cli._bench", "side-by-side benchmarks of dispatch patterns and transports"),
    "model-quality": ("perception.cli._model_quality", "score each reference model on an unseen drive"),
    "render": ("perception.cli._render", "render frames of a replay output to PNG"),
}


def _available() -> dict[str, tuple[str, str]]:
    return {name: entry for name, entry in COMMANDS.items() if importlib.util.find_spec(entry[0]) is not None}


def _chosen(argv: Sequence[str]) -> str | None:
    for arg in argv:
        if not arg.startswith("-"):
            return arg
    return None


def _said_by(argv: Sequence[str]) -> str:
    """Who a line on stderr is from, before (or without) parsed arguments: ``perception <command>`` when
    ``argv`` chooses one, else ``perception``."""
    chosen = _chosen(argv)
    return f"perception {chosen}" if chosen in COMMANDS else "perception"


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perception",
        description="Multi-sensor perception fusion runtime on NVIDIA Triton.",
        epilog=EXIT_CODES_HELP,
    )
    parser.add_argument("--version", action="version", version=f"perception {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = _chosen(argv)
    for name, (module_name, help_text) in _available().items():
        if name == chosen:
            importlib.import_module(module_name).register(sub)
        else:
            sub.add_parser(name, help=help_text)
    return parser


def _setup_logging(verbose: int, quiet: bool) -> None:
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 1 else logging.INFO)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if verbose < 2:
        for noisy in ("matplotlib", "PIL", "asyncio"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command of ``argv`` (default: the program's arguments) and return its exit code. A fusion call it
    left hung in its worker thread (abandoned at close, still running: :func:`_hung_fusion`) is named on stderr
    and fails the command (its code, or 1 for 0); run as the program (``argv`` None: the ``perception`` script,
    ``python -m perception``) the process then ends at once, without waiting for that thread."""
    program = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    code = _command(argv)
    hung = _hung_fusion()
    if hung:
        calls = "1 fusion call" if hung == 1 else f"{hung} fusion calls"
        sys.stderr.write(
            f"{_said_by(argv)}: error: {calls} hung, abandoned at close and still running in a worker thread; "
            "exiting without waiting for it\n"
        )
        code = code or EXIT_ERROR
        if program:
            _exit_now(code)
    return code


def _hung_fusion() -> int:
    """Fusion calls abandoned still running in this process (``perception.scheduler.abandoned_fusion_running``);
    0 when the command never imported the scheduler (nothing is imported for it: ``perception --help`` stays light)."""
    if "perception.scheduler" not in sys.modules:
        return 0
    from perception.scheduler import abandoned_fusion_running

    return abandoned_fusion_running()


def _exit_now(code: int) -> NoReturn:
    """End the process with ``code`` now, its output flushed: the interpreter's exit would join every thread
    that is not a daemon, a hung fusion call's among them, forever. The command has released what it opened
    (the embedded server, recordings, outputs) on its way out; only the interpreter's own clean-up is skipped."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _stdout_gone() -> bool:
    """True when the reader of standard output went away (a pipe whose reading end is closed); its fd is
    then pointed at /dev/null, so that the interpreter's last flush does not fail on it in turn."""
    try:
        fd = sys.stdout.fileno()
        if not hasattr(select, "poll"):  # (not on every platform: there the error is said as any other)
            return False
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        if not any(events & select.POLLERR for _, events in poll.poll(0)):
            return False
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except (OSError, ValueError):  # no fd (captured output): not a closed pipe
        return False
    return True


def _command(argv: list[str]) -> int:
    try:
        parser = build_parser(argv)
        args = parser.parse_args(argv)
    except KeyboardInterrupt:  # while the command's module is imported: named as once it runs
        sys.stderr.write(f"{_said_by(argv)}: interrupted\n")
        return EXIT_INTERRUPTED
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    _setup_logging(args.verbose, args.quiet)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        sys.stderr.write(f"perception {args.command}: error: {exc}\n")
        return EXIT_USAGE
    except DriveDamagedError as exc:
        sys.stderr.write(f"perception {args.command}: error: {exc}\n")
        return EXIT_DAMAGED
    except PerceptionError as exc:
        sys.stderr.write(f"perception {args.command}: error: {exc}\n")
        return EXIT_ERROR
    except OSError as exc:  # the file system refused (a path, a permission, a full disk): said in one line
        if isinstance(exc, BrokenPipeError) and _stdout_gone():
            return EXIT_OUTPUT_CLOSED  # nobody reads on: nothing to say
        logging.getLogger(__name__).debug("perception %s failed", args.command, exc_info=True)  # -vv: the traceback
        where = f"{exc.filename}: " if exc.filename is not None else ""
        sys.stderr.write(f"perception {args.command}: error: {where}{exc.strerror or exc}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stderr.write(f"perception {args.command}: interrupted\n")
        return EXIT_INTERRUPTED
