"""The allocator settings `serve` makes: a large buffer, freed and needed again, still goes back to
the kernel when freed, instead of staying in a heap that only grows (glibc's default); a TLS read
buffer comes from the heap, every time, instead of being mapped and unmapped on every read."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# In a fresh interpreter: allocator settings are process-wide and cannot be undone.
PROBE = """
import ctypes, sys
from webhook.serve import runtime_tuning

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "bounded":
    assert runtime_tuning.bound_allocator()
size = int(sys.argv[2])

def placed():
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(size)
    return block, "mmapped" if libc.mallinfo2().hblkhd - before >= size else "heap"

first, where_first = placed()
libc.free(first)  # glibc's default then raises its mmap threshold to this size
second, where_second = placed()
libc.free(second)
print(where_first, where_second)
"""

REVIEW_AT_THE_LIMIT = 3 << 20
# What the ssl module allocates for each read uvloop asks of a TLS connection: a bytes object of
# 256 KiB (its header included), shrunk to what arrived.
TLS_READ = 256 * 1024 + 33


def _glibc() -> bool:
    try:
        ctypes.CDLL(None).mallinfo2  # noqa: B018
    except (OSError, AttributeError):
        return False
    return True


PLACEMENTS = {  # id: (allocator settings, buffer size, where the first and the second one come from)
    "as-serve-sets-it-a-3MiB-buffer-is-mmapped-each-time": (
        "bounded",
        REVIEW_AT_THE_LIMIT,
        "mmapped mmapped",
    ),
    "glibc-default-moves-the-second-into-the-heap": ("default", REVIEW_AT_THE_LIMIT, "mmapped heap"),
    "as-serve-sets-it-a-TLS-read-buffer-is-never-mmapped": ("bounded", TLS_READ, "heap heap"),
}


@pytest.mark.skipif(not _glibc(), reason="glibc's allocator only (mallopt, mallinfo2)")
@pytest.mark.parametrize(("mode", "size", "where"), list(PLACEMENTS.values()), ids=list(PLACEMENTS))
def test_large_buffers_are_mapped_and_tls_read_buffers_are_not(mode: str, size: int, where: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode, str(size)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == where


TRIM_PROBE = """
import ctypes
from webhook.serve import runtime_tuning

assert runtime_tuning.bound_allocator()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]

def resident_mib():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2**20

# 64 MiB of 64 KiB blocks (below the mmap threshold: from the heap), every 16th kept: freed space
# between live blocks, which a trim of the heap's top cannot reach.
blocks = [libc.malloc(64 * 1024) for _ in range(1024)]
for block in blocks:
    libc.memset(block, 1, 64 * 1024)
for i, block in enumerate(blocks):
    if i % 16:
        libc.free(block)
before = resident_mib()
runtime_tuning.give_back_free_memory()
print(round(before - resident_mib()))
"""


@pytest.mark.skipif(not _glibc(), reason="glibc's allocator only (malloc_trim)")
def test_free_memory_between_live_blocks_goes_back_to_the_kernel() -> None:
    out = subprocess.run(
        [sys.executable, "-c", TRIM_PROBE], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    assert int(out.stdout.strip()) >= 32  # MiB of the 60 freed
