"""`retaining-saver`: storage statistics, retention plans and passes, pruning and compaction.

    retaining-saver stats   TARGET [--thread ID ...] [--top N] [--no-channels]
    retaining-saver plan    TARGET [--thread ID ...] [POLICY] [--channels]
    retaining-saver enforce TARGET [--thread ID ...] [POLICY] [--channels] [--apply]
    retaining-saver prune   TARGET --thread ID [--thread ID ...] [--strategy S] [--apply]
    retaining-saver compact TARGET [--min-free-ratio R] [--apply]
    retaining-saver index   TARGET
    retaining-saver sweep   TARGET --idle-for AGE [--strategy S] [--max-age AGE] [--limit N]
                            [--pace P]
    retaining-saver demo    [--turns N] [--keep PATH]

    TARGET  sqlite:///PATH, postgresql://... or postgres://... (or --target URL),
            or --sqlite PATH, or --postgres DSN (any libpq DSN, key=value too)
    POLICY  [--prune-branches] [--keep-runs N] [--compact-steps] [--min-age AGE]
            [--graft-links] [--max-delete N]; AGE as 7d, 12h, 30m (0: none).
            --prune-branches, --keep-runs and --compact-steps need --min-age.
    Every command also takes --json and --debug.

Nothing is deleted or vacuumed without --apply: enforce, prune and compact are
dry runs otherwise and say what they would save (rows and bytes per table, per
thread and in all). plan lists, per thread, each checkpoint a pass would
delete (and why) and each it keeps (and what protects it), with a legend of
every reason and protection it names. enforce and plan walk every thread
unless --thread names some; a thread with no checkpoints is an error. They
also show the store's space on disk before and after (SQLite's file, pages
and freelist; Postgres's relation sizes), and with --channels the values,
writes and bytes of each channel: which channel takes the space.

stats, plan, and enforce/prune/compact without --apply change nothing: a SQLite
file is opened read-only and creates no -wal or -shm file beside it (a missing
file is an error, never a new database), a Postgres session is read-only, and
the saver's setup() never runs, so no table, migration, journal mode or index
is created. A store without the LangGraph tables is an error.

With --apply the CLI still never runs setup() (set a store up from your
application), but the backend creates what it keeps beside the saver's tables,
as an application's first cleanup would: the reclaim records' table, and on
SQLite the parent index. On Postgres, index creates both (the index
concurrently); creating them is all it does, so it needs no --apply.

Output is tables; when stdout is not a terminal it is plain tab-separated
text. With --json it is one JSON document on stdout instead. A terminal shows
progress over threads on stderr. Passwords are masked (as ***) in everything
printed, in every DSN form.

Errors are one line on stderr, "retaining-saver: error: ..."; --debug adds the
(masked) traceback before it. With --json an error also prints one JSON
document on stdout, {"error": "..."}, so stdout always parses; when plan or
enforce had finished some threads, it carries them as "partial". Exit status:
0 done, 1 the store or the command failed, 2 the command line is wrong (an
option, a number, a flag the command does not use, or a target that does not
parse).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from retaining_saver import __version__
from retaining_saver import _cli_commands as commands
from retaining_saver import _cli_options as options
from retaining_saver import _cli_render as render
from retaining_saver._cli_output import (
    PROG,
    Doc,
    Redactor,
    Render,
    masked_logs,
    print_document,
    report_failure,
)
from retaining_saver._cli_sweep import SWEEP_SUMMARY, add_sweep_options, render_sweep, run_sweep
from retaining_saver._cli_targets import (
    Store,
    StoreKind,
    Target,
    UsageError,
    open_store,
    resolve_target,
)
from retaining_saver._maintenance import PRUNE_STRATEGIES


@dataclass(frozen=True)
class Command:
    """One subcommand: its flags, what it does to an opened store, and how it prints.

    Attributes:
        name: What the user types.
        summary: One line for `--help`.
        run: Fills the output document from the opened store.
        render: Prints that document as tables.
        options: Adds the command's own flags to its parser.
        prepare: Checks the parsed flags before any store is opened (a usage
            error then opens nothing).
        stores: The kinds of store it works on.
        writes: Whether, with these flags, it opens the store for writing.
    """

    name: str
    summary: str
    run: Callable[[Store, argparse.Namespace, Doc], None]
    render: Render
    options: Callable[[argparse.ArgumentParser], None] = lambda sub: None
    prepare: Callable[[argparse.Namespace, Doc], None] = lambda args, doc: None
    stores: tuple[StoreKind, ...] = ("sqlite", "postgres")
    writes: Callable[[argparse.Namespace], bool] = lambda args: bool(getattr(args, "apply", False))


COMMANDS: dict[str, Command] = {}


def register(command: Command) -> Command:
    """Add `command` to the command line (a module adding one imports this and calls it)."""
    COMMANDS[command.name] = command
    return command


class _Parser(argparse.ArgumentParser):
    """Reports a bad command line as a `UsageError`, so it is one masked line like any error."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description=(__doc__ or "").split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # `--app` must not quietly mean `--apply`
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS.values():
        sub = subparsers.add_parser(
            command.name, help=command.summary, description=command.summary, allow_abbrev=False
        )
        _add_target(sub)
        command.options(sub)
        sub.add_argument("--json", action="store_true", help="print one JSON document")
        sub.add_argument("--debug", action="store_true", help="print a traceback on error")
    # Listed for --help only: main() hands `demo` to `_demo` before parsing.
    subparsers.add_parser("demo", help="a small chat stored bare and under each rule")
    return parser


def _add_target(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("target", nargs="?", metavar="TARGET", help="sqlite:///PATH or postgresql://")
    sub.add_argument("--target", dest="target_url", metavar="URL", help="as TARGET")
    sub.add_argument("--sqlite", metavar="PATH", help="a SqliteSaver database file")
    sub.add_argument("--postgres", metavar="DSN", help="a PostgresSaver database (libpq DSN)")


def add_apply(sub: argparse.ArgumentParser, verb: str) -> None:
    """`--apply` (really `verb`) and `--dry-run` (the default, kept for old calls)."""
    apply = sub.add_mutually_exclusive_group()
    apply.add_argument("--apply", action="store_true", help=f"really {verb}")
    apply.add_argument("--dry-run", action="store_true", help="the default (kept for old calls)")


def _target(command: Command, args: argparse.Namespace) -> Target:
    target = resolve_target(args.target, args.target_url, args.sqlite, args.postgres)
    if target.kind not in command.stores:
        if command.name == "compact":
            raise UsageError("compact is for SQLite files; Postgres reclaims space with VACUUM")
        if command.name == "index":
            raise UsageError(
                "index is for Postgres; SQLite creates it on the first enforce --apply"
            )
        raise UsageError(f"{command.name} is not for {target.kind} stores")
    return target


# The commands


def _stats_options(sub: argparse.ArgumentParser) -> None:
    options.add_thread_option(sub)
    sub.add_argument(
        "--top",
        type=options.count,
        metavar="N",
        help=f"list the N threads holding the most bytes (default {commands.TOP_THREADS})",
    )
    sub.add_argument(
        "--no-channels",
        action="store_true",
        help="skip the per-channel figures (on SQLite they decode every checkpoint)",
    )


def _pass_options(apply: str | None) -> Callable[[argparse.ArgumentParser], None]:
    def add(sub: argparse.ArgumentParser) -> None:
        options.add_thread_option(sub)
        options.add_policy_options(sub)
        sub.add_argument(
            "--channels",
            action="store_true",
            help="also rows and bytes per channel, before and after (on SQLite they "
            "decode each thread's checkpoints)",
        )
        if apply:
            add_apply(sub, apply)

    return add


def _with_policy(args: argparse.Namespace, doc: Doc) -> None:
    args.policy = options.policy_of(args)
    doc["policy"] = options.policy_doc(args)


def _prune_options(sub: argparse.ArgumentParser) -> None:
    options.add_thread_option(sub, required=True)
    sub.add_argument(
        "--strategy",
        choices=PRUNE_STRATEGIES,
        default="keep_latest",
        help="keep_latest: each namespace keeps its latest checkpoint (and what the "
        "rules protect); delete: the whole thread goes (default: keep_latest)",
    )
    add_apply(sub, "prune")


def _compact_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--min-free-ratio",
        type=options.ratio,
        default=0.25,
        metavar="R",
        help="vacuum only once this share of the file's pages is free, within [0, 1] "
        "(default 0.25)",
    )
    add_apply(sub, "vacuum")


# A command from another module: build its `Command` there (its options, a `run` filling
# the document, a renderer from `_cli_render` or its own) and list it here, or import that
# module at the end of this one and call `register` in it.
for _command in (
    Command(
        "stats",
        "rows and bytes per table, channel and thread, and the store's space on disk",
        commands.stats,
        render.stats,
        _stats_options,
        commands.check_stats,
    ),
    Command(
        "plan",
        "per checkpoint, what a retention pass would delete or keep, and why",
        commands.plan,
        render.plan,
        _pass_options(None),
        _with_policy,
    ),
    Command(
        "enforce",
        "run retention per thread (a dry run without --apply)",
        commands.enforce,
        render.passes,
        _pass_options("delete"),
        _with_policy,
    ),
    Command(
        "prune",
        "upstream's prune for the threads named (a dry run without --apply)",
        commands.prune,
        render.passes,
        _prune_options,
    ),
    Command(
        "compact",
        "SQLite: vacuum once enough of the file is free (with --apply)",
        commands.compact,
        render.compaction,
        _compact_options,
        stores=("sqlite",),
    ),
    Command(
        "index",
        "Postgres: create the parent index and reclaim records' table",
        commands.index,
        render.nothing,
        stores=("postgres",),
        writes=lambda args: True,
    ),
    Command("sweep", SWEEP_SUMMARY, run_sweep, render_sweep, add_sweep_options),
):
    register(_command)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 done, 1 failed, 2 bad usage)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["demo"]:  # no target: the demo makes its own store
        # Imported here: it builds graphs (langgraph.graph), which no other command needs
        # and which took about half of every command's start (0.6 s of 1.2 s).
        from retaining_saver import _demo

        return _demo.main(arguments[1:])
    # Built before parsing: even a usage error may quote a DSN back.
    redact = Redactor.of_arguments(arguments)
    doc: Doc = {}
    shown: Render | None = None
    try:
        with masked_logs(redact):
            try:
                args = _parser().parse_args(arguments)
                command = COMMANDS[args.command]
                shown = command.render
                doc["command"] = command.name
                command.prepare(args, doc)
                target = _target(command, args)
                doc["store"] = target.kind
                with open_store(target, writable=command.writes(args)) as store:
                    command.run(store, args, doc)
            except (Exception, KeyboardInterrupt) as error:
                if isinstance(error, BrokenPipeError):
                    raise
                return report_failure(error, doc, arguments, redact, shown)
            print_document(doc, as_json=args.json, redact=redact, render=command.render)
    except BrokenPipeError:
        # The reader went away (`| head`): what it read was right; say nothing more.
        _stdout_to_devnull()
    return 0


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
