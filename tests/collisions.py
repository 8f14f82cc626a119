"""Keys whose 40-bit hashes collide, made by inverting the engine's key hash (engine/kernels/sort.py):
the attack tests' way of putting distinct keys into one hash run."""
from __future__ import annotations

M64 = (1 << 64) - 1
SEED = 0x9E3779B97F4A7C15
C1, C2 = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53


def _mix(x):
    x ^= x >> 33
    x = (x * C1) & M64
    x ^= x >> 33
    x = (x * C2) & M64
    return x ^ (x >> 33)


def _unmix(y):
    y ^= y >> 33
    y = (y * pow(C2, -1, 1 << 64)) & M64
    y ^= y >> 33
    y = (y * pow(C1, -1, 1 << 64)) & M64
    return y ^ (y >> 33)


def _s64(u):
    return u - (1 << 64) if u >= 1 << 63 else u


def colliding_last_columns(prefix, top40, lows):
    """Values of a key's last column that, after the fixed ``prefix`` columns, give keys whose 40-bit
    hashes all equal ``top40`` (their 64-bit mixes differ in the low 24 bits only)."""
    h = SEED
    for c in prefix:
        h = _mix(h ^ (c & M64))
    return [_s64(_unmix((top40 << 24) | lo) ^ h) for lo in lows]
