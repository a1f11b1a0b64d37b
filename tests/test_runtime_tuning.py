"""The allocator settings `serve` makes: a large buffer, freed and needed again, still goes back to
the kernel when freed, instead of staying in a heap that only grows (glibc's default)."""

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
size = 3 << 20  # a review at the body limit
libc.free(libc.malloc(size))  # the first one is mmap()ed; glibc then raises its threshold
held = libc.malloc(size)
print("mmapped" if libc.mallinfo2().hblkhd >= size else "heap")
libc.free(held)
"""


def _glibc() -> bool:
    try:
        ctypes.CDLL(None).mallinfo2  # noqa: B018
    except (OSError, AttributeError):
        return False
    return True


@pytest.mark.skipif(not _glibc(), reason="glibc's allocator only (mallopt, mallinfo2)")
@pytest.mark.parametrize(
    ("mode", "where"),
    [
        pytest.param("bounded", "mmapped", id="as-serve-sets-it-the-second-3MiB-buffer-is-mmapped-too"),
        pytest.param("default", "heap", id="glibc-default-moves-it-into-the-heap"),
    ],
)
def test_a_large_buffer_needed_again_is_still_given_back_whole(mode: str, where: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
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
