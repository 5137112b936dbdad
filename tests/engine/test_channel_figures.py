"""Which channel takes the space: statistics and retention reports per channel, and the
store's space on disk, on real graph runs, through the Python API and the command line.

The graph is the contract's costly case: a tool returns one large result into a list
channel, and every later step appends to that list, so each checkpoint stores the large
result again (a blob per version on Postgres and in memory; inside every checkpoint's
payload on SQLite). The result is random hex, which TOAST does not compress.
"""

from __future__ import annotations

import operator
import random
import sys
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from cli_kit import cli, pg_url
from savers import KINDS, open_async, open_sync, open_sync_at, store

from retaining_saver import RetainingSaver, RetentionPolicy, RetentionReport, StorageStats
from retaining_saver.testing.graphs import line_graph, thread

BIG = random.Random(24).randbytes(10_000).hex()
SIZE = len(BIG)
STEPS = 5
"""Steps after the tool's: with the tool's own, STEPS + 1 checkpoints store the result."""
SLACK = 1024
"""Bytes of everything else a snapshot of the list holds (the short notes, headers)."""
# Intermediate steps of a finished run go: the copies of the result they stored with them.
COMPACT = RetentionPolicy(compact_steps=True, history_min_age=timedelta(0))
PROGRAM = (sys.executable, "-m", "retaining_saver")


class ToolState(TypedDict):
    results: Annotated[list[str], operator.add]
    step: int


def _note(i: int) -> tuple[str, Any]:
    return f"think_{i}", lambda state: {"results": [f"note {i}"], "step": i}


def tool_graph(saver: Any) -> Any:
    """`tool` returns BIG into `results`; then STEPS steps each append a short note."""
    tool = ("tool", lambda state: {"results": [BIG]})
    return line_graph(ToolState, [tool, *(_note(i) for i in range(STEPS))], saver)


START: dict[str, Any] = {"results": [], "step": 0}


def _assert_the_result_takes_the_space(stats: StorageStats) -> None:
    """`results` first, holding STEPS + 1 copies of BIG and one write of it, and nearly
    every byte any channel takes."""
    name, results = next(iter(stats.channels.items()))
    assert name == "results", list(stats.channels)
    assert (STEPS + 1) * SIZE <= results.value_bytes <= (STEPS + 1) * SIZE + SLACK
    assert SIZE <= results.write_bytes <= SIZE + SLACK
    others = sum(c.bytes for n, c in stats.channels.items() if n != "results")
    assert others < SLACK
    ranked = [c.bytes for c in stats.channels.values()]
    assert ranked == sorted(ranked, reverse=True)


def _assert_space(kind: str, report: RetentionReport, dry: RetentionReport) -> None:
    """Space on disk: measured before and after a pass, unknown after a dry run."""
    assert report.after is not None and dry.after is not None
    if kind == "memory":
        assert (report.before.space, report.after.space) == (None, None)
        return
    before, after = report.before.space, report.after.space
    assert before is not None and after is not None and dry.after.space is None
    if kind == "sqlite":
        assert before.pages and before.page_size and before.file_bytes
        # Deleting rows frees pages inside the file: the freelist grows.
        assert after.free_pages is not None and before.free_pages is not None
        assert after.free_pages > before.free_pages
    else:
        names = {"checkpoints", "checkpoint_blobs", "checkpoint_writes"}
        assert names <= set(before.relations) and names <= set(after.relations)
        assert before.relations["checkpoint_blobs"] > (STEPS + 1) * SIZE


@pytest.mark.parametrize("kind", KINDS)
def test_the_large_result_ranks_first_and_a_pass_reports_it_per_channel(
    kind: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner, admission="off")
        graph = tool_graph(saver)
        graph.invoke(START, thread("tool"))
        for _ in range(2):  # "twice": its second run re-snapshots two results
            graph.invoke(START, thread("twice"))
        measured = saver.storage_stats("tool", channels=True)
        _assert_the_result_takes_the_space(measured)
        whole = saver.storage_stats(channels=True, top_threads=2)
        assert [t.thread_id for t in whole.top_threads] == ["twice", "tool"]
        assert next(iter(whole.channels)) == "results"

        dry = saver.enforce_thread_retention("tool", COMPACT, dry_run=True, channels=True)
        done = saver.enforce_thread_retention("tool", COMPACT, channels=True)
        assert dry.deleted and set(done.deleted) == set(dry.deleted)
        assert done.before.channels == dry.before.channels == measured.channels
        assert done.after is not None and dry.after is not None
        # The dry run's figures per channel are what the pass leaves, as measured after.
        assert dry.after.channels == done.after.channels
        assert done.after.channels == saver.storage_stats("tool", channels=True).channels
        gone = done.before.channels["results"].bytes - done.after.channels["results"].bytes
        # The intermediate steps' copies went; the last step's copy and the tool's write stay.
        assert gone >= (STEPS - 1) * SIZE
        assert done.after.channels["results"].bytes >= 2 * SIZE
        _assert_space(kind, done, dry)
        plain = saver.enforce_thread_retention("twice", dry_run=True)
        assert plain.before.channels == {} and plain.after is not None
        assert plain.after.channels == {}


@pytest.mark.parametrize("kind", KINDS)
async def test_async_passes_report_the_same_channels(
    kind: str, request: pytest.FixtureRequest
) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner, admission="off")
        graph = tool_graph(saver)
        for thread_id in ("a", "b"):
            await graph.ainvoke(START, thread(thread_id))
        dry = [
            r async for r in saver.aenforce_retention(None, COMPACT, dry_run=True, channels=True)
        ]
        done = [r async for r in saver.aenforce_retention(["a", "b"], COMPACT, channels=True)]
        assert [r.thread_id for r in done] == ["a", "b"]
        for planned, report in zip(dry, done, strict=True):
            _assert_the_result_takes_the_space(report.before)
            assert report.after is not None and planned.after is not None
            assert planned.after.channels == report.after.channels
            assert next(iter(report.after.channels)) == "results"
        left = await saver.astorage_stats("a", channels=True)
        assert done[0].after is not None and left.channels == done[0].after.channels
        with pytest.raises(TypeError, match="channels"):
            await saver.aenforce_thread_retention("a", channels=1)  # type: ignore[arg-type]


# The command line, as a subprocess


def _sqlite_store(tmp_path: Path) -> str:
    path = tmp_path / "tool.sqlite"
    with open_sync_at("sqlite", str(path)) as saver:
        graph = tool_graph(saver)
        for thread_id in ("a", "b"):
            graph.invoke(START, thread(thread_id))
    return f"sqlite:///{path}"


def _postgres_store(request: pytest.FixtureRequest) -> str:
    dsn = store("postgres", request)
    with open_sync_at("postgres", dsn) as saver:
        graph = tool_graph(saver)
        for thread_id in ("a", "b"):
            graph.invoke(START, thread(thread_id))
    return pg_url(dsn)


def _run(*args: str) -> Any:
    ran = cli(*args, program=PROGRAM)
    assert ran.code == 0, ran.err
    return ran.json() if "--json" in args else ran.out


def _assert_cli_figures(url: str, kind: str) -> None:
    stats = _run("stats", url, "--json")
    name, results = next(iter(stats["channels"].items()))
    assert name == "results"
    # Two threads, each STEPS + 1 copies of BIG.
    assert 2 * (STEPS + 1) * SIZE <= results["value_bytes"] <= 2 * ((STEPS + 1) * SIZE + SLACK)
    one = _run("stats", url, "--thread", "a", "--json")
    assert one["channels"]["results"]["value_bytes"] * 2 == results["value_bytes"]

    policy = ("--compact-steps", "--min-age", "0", "--channels")
    dry = _run("enforce", url, *policy, "--json")
    table = _run("plan", url, *policy)
    done = _run("enforce", url, *policy, "--apply", "--json")
    channels = done["totals"]["channels"]
    assert next(iter(channels)) == "results"
    assert channels == dry["totals"]["channels"]
    saved = channels["results"]["bytes_before"] - channels["results"]["bytes_after"]
    assert saved >= 2 * (STEPS - 1) * SIZE
    assert [t["channels"]["results"] for t in done["threads"]] == [
        t["channels"]["results"] for t in dry["threads"]
    ]
    assert dry["space"]["before"] == done["space"]["before"]
    assert dry["space"]["after"] is None and done["space"]["after"] is not None
    assert "per channel, in all, 2 threads (after: as it would be)" in table.splitlines()
    if kind == "sqlite":
        assert done["space"]["after"]["free_pages"] > done["space"]["before"]["free_pages"]
        assert "SQLite file (whole store)" in table.splitlines()
    else:
        assert done["space"]["after"]["relations"]["checkpoint_blobs"] > 0
        assert "Postgres relations (whole store)" in table.splitlines()
    plain = _run("enforce", url, "--json")
    assert "channels" not in plain["threads"][0] and "channels" not in plain["totals"]


def test_sqlite_cli_names_the_channel_and_what_a_pass_saves(tmp_path: Path) -> None:
    _assert_cli_figures(_sqlite_store(tmp_path), "sqlite")


def test_postgres_cli_names_the_channel_and_what_a_pass_saves(
    request: pytest.FixtureRequest,
) -> None:
    _assert_cli_figures(_postgres_store(request), "postgres")
