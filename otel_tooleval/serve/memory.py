"""The ``serve`` process's allocator: large blocks go back to the system when freed.

glibc's malloc serves a block of at least ``M_MMAP_THRESHOLD`` bytes (128 KiB at first) with
its own mapping, returned to the system on ``free``. But each time such a block is freed the
threshold rises to its size (up to 32 MiB), so from then on blocks of that size come from the
heap, and a heap keeps what it freed below its top. The bodies, parsed requests and decoded
values of large requests (a 15 MiB attribute is a 15 MiB body, JSON document, protobuf string
and Python string) then stay in RSS after the request: twice the spans actually held, in the
measurements of tests/robustness/scripts/memory_attacks.py. A fixed threshold turns that off.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

_M_MMAP_THRESHOLD = -3      # glibc's malloc.h
THRESHOLD = 1024 * 1024     # blocks from 1 MiB up are mapped: a syscall pair each, then freed


def return_large_blocks(threshold: int = THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for this process; False elsewhere
    (another C library, or no malloc to call)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold))
    except (OSError, AttributeError):
        return False
