"""What the command line prints: documents as tables or JSON, errors as one line, masked.

Every command builds one document (a dict). `print_document` prints it as
JSON or renders it as tables from the same data, so both say the same.
`Redactor` masks every password the command line was given, in any DSN
form, in everything printed: driver errors echo the DSN as given.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote, unquote

from retaining_saver._cli_targets import CliError

PROG = "retaining-saver"

Doc = dict[str, Any]

_MASK = "***"

# scheme://user:SECRET@host: greedy up to the token's last "@", as libpq reads it.
_URL_PASSWORD = re.compile(r"[A-Za-z][\w+.-]*://[^\s:/?#@'\"]*:(?P<secret>[^\s'\"]*)@")
# user:SECRET@host with no scheme; "//" after the colon is a URL the rule above handles.
_BARE_PASSWORD = re.compile(r"(?<![\w.:/+-])[^\s:/?#@'\"=]+:(?!//)(?P<secret>[^\s'\"]*)@(?=\S)")
# password=SECRET in key/value DSNs and URL queries (sslpassword too), '...' quoted as libpq does.
_KEY_PASSWORD = re.compile(
    r"password\s*=\s*(?P<secret>'(?:[^'\\]|\\.)*'|[^\s&'\"]+)", re.IGNORECASE
)
_PATTERNS = (_URL_PASSWORD, _BARE_PASSWORD, _KEY_PASSWORD)


class Redactor:
    """Masks passwords: each one shaped like a DSN's in a text, and each one the arguments hold.

    The patterns catch a password wherever it sits in a DSN; the literal pass
    catches one that a message quotes outside any DSN shape.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    @classmethod
    def of_arguments(cls, arguments: Iterable[str]) -> Redactor:
        """A redactor for every password in `arguments`, as given and as (de)coded."""
        found: set[str] = set()
        for argument in arguments:
            found.update(_secrets_in(argument))
        return cls(found | {unquote(s) for s in found} | {quote(s, safe="") for s in found})

    def __call__(self, text: str) -> str:
        for pattern in _PATTERNS:
            text = pattern.sub(_mask_secret, text)
        for secret in self.secrets:
            text = text.replace(secret, _MASK)
        return text


def _mask_secret(match: re.Match[str]) -> str:
    whole, start = match[0], match.start()
    return whole[: match.start("secret") - start] + _MASK + whole[match.end("secret") - start :]


def _secrets_in(argument: str) -> set[str]:
    # Not the bare user:secret@host shape: a thread id may look like one, and its
    # "secret" would then be masked wherever it appears. Messages are masked by shape.
    shaped = (_URL_PASSWORD, _KEY_PASSWORD)
    found = {m["secret"] for pattern in shaped for m in pattern.finditer(argument)}
    found |= {s[1:-1].replace("\\'", "'") for s in found if len(s) > 1 and s[0] == s[-1] == "'"}
    password = _parsed_password(argument)
    if password:
        found.add(password)
    return found - {_MASK}


def _parsed_password(argument: str) -> str | None:
    """The password libpq reads from `argument`, if it is a DSN libpq parses."""
    if "=" not in argument and "://" not in argument:
        return None
    try:
        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:  # SQLite-only install: no DSN to parse
        return None
    try:
        return str(conninfo_to_dict(argument).get("password") or "") or None
    except ProgrammingError:
        return None


def masked(value: Any, redact: Redactor) -> Any:
    """`value` with every string in it masked; numbers and structure untouched."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(str(k)): masked(v, redact) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v, redact) for v in value]
    return value


Render = Callable[[Doc], None]
"""Prints a command's (masked) document as tables."""


def print_document(doc: Doc, *, as_json: bool, redact: Redactor, render: Render) -> None:
    """Print `doc`, masked: one JSON document, or its tables and closing message."""
    shown = masked(doc, redact)
    if as_json:
        print(json.dumps(shown, indent=2))
        return
    render(shown)
    if "message" in shown:
        print(shown["message"])


class _MaskedLogLine(logging.Handler):
    """A log record as one masked stderr line, like an error."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__(logging.WARNING)
        self.redact = redact

    def emit(self, record: logging.LogRecord) -> None:
        text = self.redact(_one_line(record.getMessage()))
        print(f"{PROG}: {record.levelname.lower()}: {text}", file=sys.stderr)


@contextmanager
def masked_logs(redact: Redactor) -> Iterator[None]:
    """Route warnings and log records (ours, the drivers') through `redact`, one line each.

    Without it, a record would reach stderr through logging's last-resort
    handler, unmasked: a driver error in it may quote the DSN.
    """
    root, handler = logging.getLogger(), _MaskedLogLine(redact)
    root.addHandler(handler)
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        root.removeHandler(handler)


def report_failure(
    error: BaseException,
    doc: Doc,
    arguments: Sequence[str],
    redact: Redactor,
    render: Render | None = None,
) -> int:
    """Report `error` as one masked line on stderr, and as JSON on stdout with --json.

    Threads a plan or pass had finished are shown too: after a failed
    `enforce --apply`, they are what changed.

    Returns:
        The exit status: the error's own for a `CliError`, else 1.
    """
    if "--debug" in arguments:
        print(redact("".join(traceback.format_exception(error))), file=sys.stderr, end="")
    message = redact(_one_line(_describe(error)) or type(error).__name__)
    done = masked(doc, redact) if doc.get("threads") else None
    if "--json" in arguments:
        print(json.dumps({"error": message} | ({"partial": done} if done else {})))
    elif done and render is not None:
        render(done)
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return error.exit_code if isinstance(error, CliError) else 1


def _describe(error: BaseException) -> str:
    if isinstance(error, CliError):
        return str(error)
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
    if isinstance(error, ModuleNotFoundError):
        return f"{error}: install retaining-saver[sqlite] or retaining-saver[postgres]"
    if isinstance(error, sqlite3.Error):
        return f"SQLite: {error}"
    if type(error).__module__.split(".")[0] == "psycopg":
        return f"Postgres: {error}"
    return f"{type(error).__name__}: {error}"


def _one_line(text: str) -> str:
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())
