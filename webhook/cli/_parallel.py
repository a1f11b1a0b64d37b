"""Deciding many manifest files in worker processes, with the output of a run in one process.

The files are cut into one contiguous shard per worker (balanced by size). A document's decision
can depend on other documents of the run (a TrainJob's TrainingRuntime, a Pod's PriorityClass,
the evictions a Kueue Workload records), so each worker reads its shard, sends back what its
documents tell about the others, receives what the whole run tells, and only then decides its
documents. The parent puts the shards' results and errors back in input order: the output, the
messages and the exit code are those of a serial run.

Workers are forked after the policies are compiled, so they share them instead of compiling them
again, and each holds only its shard's documents. Where `fork` is not available the run stays in
one process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from webhook.cli._file_engine import Context
from webhook.documents import Document, Inputs, Manifests, collect_file, no_documents
from webhook.engine import Engine
from webhook.errors import DuplicateKeyError, InputError, TrainguardError

if TYPE_CHECKING:  # multiprocessing is imported by the runs that use it (about 20 ms of start-up)
    from multiprocessing.connection import Connection

# Each worker costs about 0.1 s of CPU whatever its share (the fork's copied pages, its engine,
# warming up what the first decisions build); deciding costs about 1 ms per document of 1-2 KB.
# From 1 MiB (about 700 documents, the corpus 5 times over) a second core saves several times that.
MIN_PARALLEL_BYTES = 1024 * 1024
MAX_AUTO_WORKERS = 8  # each worker holds its shard's documents and its own copy of what it touches

Records = list[dict[str, Any]]
Decide = Callable[[Engine, list[Document]], tuple[Records, list[InputError]]]


_ENDED = "a worker process ended without its results (killed?); -j 1 decides in one process"


class WorkerError(TrainguardError):
    """A worker process died or failed: the run cannot list every document's decision."""


@dataclass(frozen=True, slots=True)
class Run:
    """What every worker needs: how to build the engine once the context is known, how to decide."""

    make_engine: Callable[[Context], Engine]
    decide: Decide


def workers_for(inputs: Inputs, jobs: int | None) -> int:
    """How many worker processes to decide `inputs` with; 1 means none (decide in this process).

    `jobs` None: one per usable CPU that no other task is running on (at most MAX_AUTO_WORKERS),
    for inputs of MIN_PARALLEL_BYTES or more. Stdin is read by this process only, so a run that
    reads it stays here.
    """
    files = _files(inputs)
    if "-" in files or (jobs is not None and jobs <= 1) or not _can_fork():
        return 1
    if jobs is None:
        if sum(_size(f) for f in files) < MIN_PARALLEL_BYTES:
            return 1
        cpus = _usable_cpus()
        jobs = min(cpus - _other_running_tasks(), MAX_AUTO_WORKERS)
    return max(1, min(jobs, len(files)))


def decide_in_workers(inputs: Inputs, workers: int, run: Run) -> tuple[Records, list[InputError]]:
    """Every document's record and every error, in the order a serial run lists them."""
    import multiprocessing

    files = _files(inputs)
    shards = _shards(files, workers)
    ctx = multiprocessing.get_context("fork")
    conns: list[Connection] = []
    procs = []
    try:
        for shard in shards:
            parent_end, child_end = ctx.Pipe()
            proc = ctx.Process(target=_work, args=(child_end, shard, run, [*conns, parent_end]), daemon=True)
            proc.start()
            child_end.close()
            conns.append(parent_end)
            procs.append(proc)
        read = [_receive(conn) for conn in conns]
        context = Context()
        per_file: list[tuple[int, list[InputError]]] = []
        for counts, shard_context in read:
            per_file.extend((n, [_unpack(e) for e in errors]) for n, errors in counts)
            context.update(shard_context)
        for conn in conns:
            _send(conn, context)
        records: Records = []
        decide_errors: list[InputError] = []
        for conn in conns:
            shard_records, shard_errors = _receive(conn)
            records.extend(shard_records)
            decide_errors.extend(_unpack(e) for e in shard_errors)
        return records, _read_errors(inputs, per_file) + decide_errors
    finally:
        for conn in conns:
            conn.close()
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _work(conn: Connection, files: list[str], run: Run, others: list[Connection]) -> None:
    for other in others:  # the parent's ends of the pipes, inherited by the fork
        other.close()
    try:
        out = Manifests()
        counts = []
        for path in files:
            before = len(out.documents), len(out.errors)
            collect_file(path, out)
            counts.append((len(out.documents) - before[0], [_pack(e) for e in out.errors[before[1] :]]))
        conn.send(("ok", (counts, Context.of(out.documents))))
        context = conn.recv()
        records, errors = run.decide(run.make_engine(context), out.documents)
        conn.send(("ok", (records, [_pack(e) for e in errors])))
    except BaseException:  # whatever it is, the parent reports it, unless it is gone already
        import traceback

        with contextlib.suppress(OSError):
            conn.send(("failed", traceback.format_exc()))
    finally:
        conn.close()


def _send(conn: Connection, message: Any) -> None:
    try:
        conn.send(message)
    except OSError:
        raise WorkerError(_ENDED) from None


def _receive(conn: Connection) -> Any:
    try:
        status, payload = conn.recv()
    except (EOFError, OSError):
        raise WorkerError(_ENDED) from None
    if status != "ok":
        raise WorkerError(f"a worker process failed:\n{payload}")
    return payload


def _read_errors(inputs: Inputs, per_file: list[tuple[int, list[InputError]]]) -> list[InputError]:
    """The reading errors in the order `collect_inputs` lists them, "no documents" included."""
    errors: list[InputError] = []
    results = iter(per_file)
    for arg, files in inputs:
        if isinstance(files, InputError):
            errors.append(files)
            continue
        found = 0
        before = len(errors)
        for _ in files:
            n, file_errors = next(results)
            found += n
            errors.extend(file_errors)
        if not found and len(errors) == before:
            errors.append(no_documents(arg, files))
    return errors


def _shards(files: list[str], n: int) -> list[list[str]]:
    """`files` cut into min(n, len(files)) contiguous, non-empty runs of about equal size in bytes."""
    n = min(n, len(files))
    sizes = [max(_size(f), 1) for f in files]
    total = sum(sizes)
    cuts: list[int] = []
    done = 0
    for i in range(1, len(files)):
        done += sizes[i - 1]
        wanted = n - 1 - len(cuts)
        if not wanted:
            break
        if len(files) - i == wanted or done >= total * (len(cuts) + 1) / n:
            cuts.append(i)
    bounds = [0, *cuts, len(files)]
    return [files[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


_ERRORS = {cls.__name__: cls for cls in (InputError, DuplicateKeyError)}


def _pack(exc: InputError) -> tuple[str, str, str | None, int | None, int | None, str | None]:
    """An error as plain values: the exception's own pickling would keep only its text."""
    return (type(exc).__name__, exc.message, exc.source, exc.document, exc.line, exc.field)


def _unpack(packed: tuple[str, str, str | None, int | None, int | None, str | None]) -> InputError:
    kind, message, source, document, line, field = packed
    return _ERRORS.get(kind, InputError)(message, source=source, document=document, line=line, field=field)


def _files(inputs: Inputs) -> list[str]:
    return [f for _, files in inputs if not isinstance(files, InputError) for f in files]


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0  # the worker that reads it reports why


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _other_running_tasks() -> int:
    """Tasks other than this one that are running or ready to run now (Linux; 0 elsewhere).

    On a machine whose CPUs other work keeps busy, a second worker only shares them: the run
    takes as long and costs more CPU (the workers' copied pages, their engines). /proc/loadavg's
    fourth field counts the runnable tasks at this instant, this one included; the 1-minute load
    average would count this program's own earlier runs.
    """
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return max(0, int(f.read().split()[3].split("/")[0]) - 1)
    except (OSError, ValueError, IndexError):
        return 0


def _can_fork() -> bool:
    return hasattr(os, "fork")  # what multiprocessing's "fork" start method needs
