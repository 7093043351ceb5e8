"""Exit codes of the ``perception`` command: the one definition (``perception --help`` prints them)."""

from __future__ import annotations

__all__ = [
    "EXIT_CODES_HELP",
    "EXIT_DAMAGED",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_OUTPUT_CLOSED",
    "EXIT_USAGE",
]

EXIT_OK = 0
#: Something failed (a drive that cannot be opened, the server, a model...): one error line on stderr.
EXIT_ERROR = 1
#: A user error: bad option or launch profile, unknown sensor, missing file.
EXIT_USAGE = 2
#: The drive is damaged (damaged chunk, truncation, damaged summary). ``info``, ``replay``, ``eval`` and ``budget``
#: still produce everything the readable data allows and report the damage; with ``--strict`` the
#: damage is an error before anything runs. Either way one line on stderr names the file and byte offset.
EXIT_DAMAGED = 3
EXIT_INTERRUPTED = 130
#: The reader of the output went away (``perception config FILE | head -1``): ended quietly, as a command
#: that SIGPIPE ends (128 + 13).
EXIT_OUTPUT_CLOSED = 141

EXIT_CODES_HELP = (
    "exit codes: 0 ok; 1 failure; 2 usage or configuration error; "
    "3 drive damaged (all readable data processed and the damage reported; with --strict: nothing run); "
    "130 interrupted; 141 the output's reader went away"
)
