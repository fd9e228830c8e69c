"""Tabucol local search (Hertz & de Werra 1987; dynamic tenure of Galinier & Hao 1999) and a q-search.

``tabucol`` looks for a proper q-colouring by moving one conflicting node at a time to the colour that
removes the most conflicts; the reverse move stays forbidden ("tabu") for ``L + 0.6·|conflicting nodes|``
moves, L drawn from 0..9, unless it would beat the best colouring seen (aspiration). It is seeded by a
(N, q) preference matrix ``pref``: the start colouring is its row-wise argmax and, among moves that remove
equally many conflicts, the colour with the higher preference wins. The network's probabilities give the
network-seeded search; a matrix of uniform random numbers gives the same search from a random start.

``fewest_colours`` is the q-search: from a starting q, lower q while the search succeeds (stopping at a
lower bound on χ, below which no search can succeed), or raise it until it does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

TENURE_RANDOM = 10  # L is drawn from 0..9
TENURE_FACTOR = 0.6  # λ
TIE_WEIGHT = 0.5  # preference weight: < 1, so it only orders moves that remove equally many conflicts


@dataclass(frozen=True)
class Adjacency:
    """Compressed neighbour lists (both directions): node v's neighbours are ``nbrs[ptr[v]:ptr[v + 1]]``."""

    ptr: np.ndarray
    nbrs: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.ptr.shape[0] - 1)

    @classmethod
    def from_edges(cls, num_nodes: int, edges: np.ndarray) -> Adjacency:
        both = np.concatenate([edges, edges[:, ::-1]]) if edges.size else np.zeros((0, 2), dtype=np.int64)
        order = np.argsort(both[:, 0], kind="stable")
        counts = np.bincount(both[:, 0], minlength=num_nodes)
        ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(ptr=ptr, nbrs=both[order, 1].astype(np.int64))

    def neighbours(self, v: int) -> np.ndarray:
        return self.nbrs[self.ptr[v] : self.ptr[v + 1]]


@dataclass(frozen=True)
class SearchResult:
    colours: np.ndarray
    conflicts: int  # conflicting edges of the best colouring found (0: proper)
    moves: int  # moves made until the best colouring was first reached


def neighbour_colour_counts(adj: Adjacency, colours: np.ndarray, q: int) -> np.ndarray:
    """γ[v, c]: how many neighbours of v have colour c."""
    owner = np.repeat(np.arange(adj.num_nodes), np.diff(adj.ptr))
    gamma = np.zeros((adj.num_nodes, q), dtype=np.int64)
    np.add.at(gamma, (owner, colours[adj.nbrs]), 1)
    return gamma


def tabucol(adj: Adjacency, pref: np.ndarray, q: int, max_moves: int, rng: np.random.Generator) -> SearchResult:
    """Best colouring with colours 0..q-1 found within ``max_moves`` moves (stops at the first proper one)."""
    n = adj.num_nodes
    pref = np.asarray(pref, dtype=np.float64)[:, :q]
    colours = pref.argmax(axis=1).astype(np.int64) if n else np.zeros(0, dtype=np.int64)
    gamma = neighbour_colour_counts(adj, colours, q)
    nodes = np.arange(n)
    conflicts = int(gamma[nodes, colours].sum()) // 2
    best, best_colours, best_move = conflicts, colours.copy(), 0
    tabu_until = np.zeros((n, q), dtype=np.int64)
    tie = TIE_WEIGHT * pref
    tenures = rng.integers(TENURE_RANDOM, size=max_moves + 1).tolist()  # drawn up front: numpy calls are
    picks = rng.random(max_moves + 1).tolist()  # the cost of a move here
    ptr, nbrs = adj.ptr.tolist(), adj.nbrs
    for move in range(1, max_moves + 1):
        if best == 0:
            break
        bad = np.flatnonzero(gamma[nodes, colours])
        own = colours[bad]
        rows = np.arange(bad.size)
        gain = gamma[bad]
        gain -= gain[rows, own][:, None]  # change in conflicts of moving bad[i] to colour c
        allowed = (tabu_until[bad] < move) | (gain < best - conflicts)  # aspiration: a new best is never tabu
        allowed[rows, own] = False
        score = np.where(allowed, gain - tie[bad], np.inf)
        ties = np.flatnonzero(score == score.min())
        if not np.isfinite(score.flat[ties[0]]):
            continue  # every move is tabu: wait for the tenures to run out
        i, c = divmod(int(ties[int(picks[move] * ties.size)]), q)
        v, old = int(bad[i]), int(own[i])
        conflicts += int(gain[i, c])
        colours[v] = c
        around = nbrs[ptr[v] : ptr[v + 1]]
        gamma[around, old] -= 1
        gamma[around, c] += 1
        tabu_until[v, old] = move + tenures[move] + int(TENURE_FACTOR * bad.size)
        if conflicts < best:
            best, best_colours, best_move = conflicts, colours.copy(), move
    return SearchResult(colours=best_colours, conflicts=best, moves=best_move)


@dataclass(frozen=True)
class QSearch:
    colours: int  # distinct colours of the best proper colouring found
    colouring: np.ndarray  # that colouring
    moves_at_start: int  # moves to a proper colouring at the starting q (max_moves + 1: none found)
    tried: list[int]  # the q values searched, in order


def fewest_colours(
    adj: Adjacency,
    pref_at: Callable[[int], np.ndarray],
    start_q: int,
    lower_bound: int,
    max_moves: int,
    seed: int,
) -> QSearch:
    """The q-search. ``pref_at(q)`` gives the (N, q) preferences at budget q (the network is rerun at each q,
    as its input carries the budget). Every q gets a fresh generator from ``seed``: two searches with the
    same seed differ only by their preferences."""
    n = adj.num_nodes
    tried: list[int] = []
    proper: list[np.ndarray] = []

    def succeeds(q: int) -> bool:
        tried.append(q)
        found = tabucol(adj, pref_at(q), q, max_moves, np.random.default_rng([seed, q]))
        if found.conflicts == 0:
            proper.append(found.colours)
        return found.conflicts == 0

    if n == 0:
        return QSearch(colours=0, colouring=np.zeros(0, dtype=np.int64), moves_at_start=0, tried=[])
    lower_bound = max(1, lower_bound)
    q = max(start_q, lower_bound)
    tried.append(q)
    first = tabucol(adj, pref_at(q), q, max_moves, np.random.default_rng([seed, q]))
    moves_at_start = first.moves if first.conflicts == 0 else max_moves + 1
    if first.conflicts == 0:
        proper.append(first.colours)
        while q > lower_bound and succeeds(q - 1):
            q -= 1
    else:
        while q < n and not succeeds(q + 1):  # from q = max degree + 1 every conflicting node has a free colour
            q += 1
        if not proper:  # a budget too small for even that: one colour per node
            proper.append(np.arange(n, dtype=np.int64))
    best = min(proper, key=lambda c: len(np.unique(c)))
    return QSearch(colours=len(np.unique(best)), colouring=best, moves_at_start=moves_at_start, tried=tried)
