"""A pure-Python model of the PackingSampler, written from ``docs/sampler.md``,
section "PackingSampler", alone (plain integers and lists; the Feistel network
and the mixers come from ``sampler_reference``, the model of the Sampler). The
tests check that the native sampler reproduces it bit for bit."""

from __future__ import annotations

import sampler_reference as ref

TAG_PACK_PLAN = 0x6C782E706B700003
TAG_PACK_ORDER = 0x6C782E706B6F0004
TAG_PACK_IID = 0x6C782E706B690005
WINDOW = 4096


def stream_key(seed: int, tag: int, index: int) -> int:
    return ref.mix64(ref.mix64(seed ^ tag) + (index + 1) * ref.GAMMA)


def keyed_permute(length: int, key: int, position: int) -> int:
    """The image of ``position`` under the bijection of [0, length) keyed by ``key``."""
    h = ref.half_bits(length)
    keys = [ref.mix64(key + (r + 1) * ref.GAMMA) & ref.M32 for r in range(ref.ROUNDS)]
    x = ref.feistel(position, h, keys)
    while x >= length:
        x = ref.feistel(x, h, keys)
    return x


def plan(lengths: list[int], budget: int, mode: str, seed: int) -> list[list[int]]:
    """The plan's packs, each a list of record positions."""
    cost = [min(n, budget) for n in lengths]
    if mode == ref.SEQUENTIAL:
        packs: list[list[int]] = [[]]
        used = 0
        for r, c in enumerate(cost):
            if used + c > budget:
                packs.append([])
                used = 0
            packs[-1].append(r)
            used += c
        return packs
    n = len(lengths)
    key = stream_key(seed, TAG_PACK_PLAN, 0)
    order = [keyed_permute(n, key, k) for k in range(n)]
    packs = []
    for w in range(0, n, WINDOW):
        window = order[w : w + WINDOW]
        ranked = sorted(range(len(window)), key=lambda t: (-cost[window[t]], t))
        mine: list[list[int]] = []
        free: list[int] = []
        for t in ranked:
            c = cost[window[t]]
            for j, f in enumerate(free):
                if f >= c:
                    mine[j].append(window[t])
                    free[j] -= c
                    break
            else:
                mine.append([window[t]])
                free.append(budget - c)
        packs.extend(mine)
    return packs


def pack_number(packs: int, mode: str, seed: int, g: int) -> int:
    """The plan pack that pack number ``g`` of the sequence is."""
    if mode == ref.SEQUENTIAL:
        return g % packs
    if mode == ref.IID:
        return ref.reduce(stream_key(seed, TAG_PACK_IID, g % 2**64), packs)
    passno, within = divmod(g, packs)
    return keyed_permute(packs, stream_key(seed, TAG_PACK_ORDER, passno % 2**64), within)


def step(
    packs: list[list[int]], packs_per_step: int, mode: str, seed: int, s: int
) -> tuple[list[int], list[int]]:
    """Step ``s``'s positions and its ``packs_per_step + 1`` pack offsets."""
    positions: list[int] = []
    offsets = [0]
    for k in range(packs_per_step):
        positions.extend(packs[pack_number(len(packs), mode, seed, s * packs_per_step + k)])
        offsets.append(len(positions))
    return positions, offsets
