"""Hypothesis classes: dichotomy counts, coverage against brute force, shard scoring, ERM, errors."""
from __future__ import annotations

import itertools
import json
import pickle
from typing import Callable

import numpy as np
import pytest
from scipy.optimize import linprog

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.hypotheses import (
    CLASSES,
    ERMClassifier,
    Enumeration,
    FiniteClass,
    HalfspaceClass,
    HypothesisClass,
    IntervalClass,
    PointClass,
    RectangleClass,
    Shard,
    StumpClass,
    ThresholdClass,
    ThresholdHypothesis,
    hypothesis_from_dict,
    make_class,
)
from pcqr.pipeline.models.learners import StumpLearner, best_threshold

P = 3  # features of the test data


def _sample(rng: np.random.Generator, n: int, levels: int, p: int = P) -> np.ndarray:
    """n rows on a small integer grid (ties and collinear points), random scale and shift."""
    return rng.integers(0, levels, size=(n, p)) * 0.5 - 1.0


def _models() -> tuple[ThresholdHypothesis, ...]:
    """A finite class with repeated labellings (equal thresholds, cuts between the same values)."""
    return tuple(ThresholdHypothesis(f, t, up) for f in (0, 2) for t in (-0.6, -0.55, 0.1, 0.2, 5.0) for up in (True, False))


def _classes() -> dict[str, HypothesisClass]:
    return {
        "threshold": ThresholdClass(1),
        "threshold-up": ThresholdClass(0, "up"),
        "threshold-down": ThresholdClass(2, "down"),
        "interval": IntervalClass(2),
        "point": PointClass(0),
        "stump": StumpClass((0, 1, 2)),
        "stump-2": StumpClass((2, 0)),
        "rectangle": RectangleClass((0, 2)),
        "halfspace": HalfspaceClass((2, 1)),
        "finite": FiniteClass(_models()),
    }


ALL = sorted(_classes())


def _labels(enum: Enumeration, X: np.ndarray) -> np.ndarray:
    """(size, rows) labels of every representative, via predict."""
    return np.array([enum.hypothesis(i).predict(X) for i in range(enum.size())], dtype=np.int8).reshape(enum.size(), -1)


def _as_set(labels: np.ndarray) -> set[bytes]:
    return {np.asarray(row, dtype=np.int8).tobytes() for row in labels}


# --- brute force over fine grids of each class ---------------------------------------------


def _grid(values: np.ndarray) -> np.ndarray:
    """Candidate cut values: every sample value, values just off it, midpoints, far outside."""
    v = np.unique(values)
    mids = (v[1:] + v[:-1]) / 2 if v.size > 1 else np.zeros(0)
    return np.unique(np.concatenate([v, v - 1e-9, v + 1e-9, mids, [v.min() - 10, v.max() + 10], np.linspace(v.min() - 1, v.max() + 1, 41)]))


def _grid_labels(name: str, cls: HypothesisClass, S: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Labels on X (hypotheses x rows) of a fine grid of hypotheses of the class built from sample S."""
    out: list[np.ndarray] = []
    if name.startswith("threshold") or name.startswith("stump"):
        feats = cls.features if name.startswith("stump") else (cls.feature,)  # type: ignore[attr-defined]
        directions = getattr(cls, "directions", "both")
        for f in feats:
            t = _grid(S[:, f])[:, None]
            x = X[:, f][None, :]
            if directions in ("both", "up"):
                out += [x > t, x >= t]
            if directions in ("both", "down"):
                out += [x <= t, x < t]
    elif name == "interval":
        g, x = _grid(S[:, cls.feature]), X[:, cls.feature]  # type: ignore[attr-defined]
        a, b = np.meshgrid(g, g, indexing="ij")
        out += [(x[None, :] >= a.reshape(-1, 1)) & (x[None, :] <= b.reshape(-1, 1))]
    elif name == "point":
        g, x = _grid(S[:, cls.feature]), X[:, cls.feature]  # type: ignore[attr-defined]
        out += [x[None, :] == g[:, None]]
    elif name == "rectangle":
        fx, fy = cls.features  # type: ignore[attr-defined]
        gx, gy = np.unique(S[:, fx]), np.unique(S[:, fy])
        gx, gy = np.concatenate([gx, [gx.max() + 1]]), np.concatenate([gy, [gy.max() + 1]])
        for x0, x1 in itertools.combinations_with_replacement(gx, 2):
            inx = (X[:, fx] >= x0) & (X[:, fx] <= x1)
            for y0, y1 in itertools.combinations_with_replacement(gy, 2):
                out.append((inx & (X[:, fy] >= y0) & (X[:, fy] <= y1))[None, :])
    elif name == "halfspace":
        f1, f2 = cls.features  # type: ignore[attr-defined]
        angles = np.linspace(0, 2 * np.pi, 721)[:-1]
        for w1, w2 in zip(np.cos(angles), np.sin(angles)):
            proj_s = S[:, f1] * w1 + S[:, f2] * w2
            b = _grid(proj_s)[:, None]
            proj = (X[:, f1] * w1 + X[:, f2] * w2)[None, :]
            out += [proj > b, proj >= b]
    elif name == "finite":
        out += [np.array([m.predict(X) for m in cls.models])]  # type: ignore[attr-defined]
    return np.concatenate(out).astype(np.int8)


# --- counts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_one_dimensional_dichotomy_counts_are_exact(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 40))
    S = _sample(rng, n, int(rng.integers(1, 15)))
    u = np.unique(S[:, 0]).size
    assert u < n  # ties: fewer than 15 levels among at least 20 rows
    assert ThresholdClass(0, "up").enumerate(S).size() == u + 1
    assert ThresholdClass(0, "down").enumerate(S).size() == u + 1
    assert ThresholdClass(0).enumerate(S).size() == 2 * u
    assert IntervalClass(0).enumerate(S).size() == u * (u + 1) // 2 + 1
    assert PointClass(0).enumerate(S).size() == u + 1
    p_bound = 2 * P * (max(np.unique(S[:, j]).size for j in range(P)) + 1)
    assert StumpClass((0, 1, 2)).enumerate(S).size() <= p_bound


def test_counts_on_tiny_samples() -> None:
    empty, one = np.zeros((0, 2)), np.array([[1.0, 2.0], [1.0, 2.0]])
    for S, u in ((empty, 0), (one, 1)):
        assert ThresholdClass(0).enumerate(S).size() == max(2 * u, 1)
        assert IntervalClass(0).enumerate(S).size() == u * (u + 1) // 2 + 1
        assert PointClass(0).enumerate(S).size() == u + 1
        assert StumpClass((0, 1)).enumerate(S).size() == u + 1
        assert RectangleClass((0, 1)).enumerate(S).size() == u + 1
        assert HalfspaceClass((0, 1)).enumerate(S).size() == u + 1


def test_stumps_dedupe_features_with_the_same_ordering_exactly() -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=30)
    z = rng.integers(0, 4, size=30).astype(float)
    S = np.column_stack([x, 3 * x + 1, -x, z, z])  # same, reversed and repeated orderings
    enum = StumpClass((0, 1, 2, 3, 4)).enumerate(S)
    assert enum.size() == 2 * 30 + 2 * 4 - 2  # thresholds on x, plus the non-trivial ones on z
    assert len(_as_set(_labels(enum, S))) == enum.size()


def test_halfspaces_in_general_position_have_covers_count() -> None:
    for m in (1, 2, 3, 7, 25):
        S = np.random.default_rng(m).normal(size=(m, 2))
        assert HalfspaceClass((0, 1)).enumerate(S).size() == m * m - m + 2


# --- distinctness and coverage ---------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("seed", range(3))
def test_representatives_are_distinct_and_cover_a_brute_force_grid(name: str, seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    S = _sample(rng, 11, 5)
    cls = _classes()[name]
    enum = cls.enumerate(S)
    reps = _labels(enum, S)
    assert len(_as_set(reps)) == enum.size()  # pairwise distinct on the sample
    found = _as_set(_grid_labels(name, cls, S, S))
    assert found <= _as_set(reps)
    if name != "halfspace":  # a finite grid of angles can miss halfspace labellings: exact test below
        assert found == _as_set(reps)


def _separable(points: np.ndarray, positive: np.ndarray) -> bool:
    """Strict linear separability of a labelling by LP: sign (w.x - b) >= 1."""
    sign = np.where(positive, 1.0, -1.0)
    A = -sign[:, None] * np.column_stack([points, -np.ones(len(points))])
    res = linprog(np.zeros(3), A_ub=A, b_ub=-np.ones(len(points)), bounds=[(None, None)] * 3, method="highs")
    return res.status == 0


@pytest.mark.parametrize("seed", range(3))
def test_halfspaces_and_rectangles_equal_every_realisable_labelling(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    S = np.unique(rng.integers(0, 4, size=(9, 2)).astype(float), axis=0)  # grid: collinear points
    subsets = [np.array(bits, dtype=bool) for bits in itertools.product((0, 1), repeat=len(S))]
    separable = {s.astype(np.int8).tobytes() for s in subsets if _separable(S, s)}
    assert _as_set(_labels(HalfspaceClass((0, 1)).enumerate(S), S)) == separable

    def boxable(s: np.ndarray) -> bool:
        if not s.any():
            return True
        lo, hi = S[s].min(axis=0), S[s].max(axis=0)
        return not (((S >= lo) & (S <= hi)).all(axis=1) & ~s).any()

    boxes = {s.astype(np.int8).tobytes() for s in subsets if boxable(s)}
    assert _as_set(_labels(RectangleClass((0, 1)).enumerate(S), S)) == boxes


def test_enumeration_is_deterministic_and_picklable() -> None:
    S = _sample(np.random.default_rng(7), 30, 6)
    for cls in _classes().values():
        a, b = cls.enumerate(S), pickle.loads(pickle.dumps(cls.enumerate(S)))
        assert a.size() == b.size()
        for i in range(a.size()):
            assert a.hypothesis(i).to_dict() == b.hypothesis(i).to_dict()


# --- scoring --------------------------------------------------------------------------------


def _scoring_data(rng: np.random.Generator, S: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows different from the sample: sample values, cut midpoints, new values, far outside."""
    cols = []
    for j in range(S.shape[1]):
        v = np.unique(S[:, j])
        pool = np.concatenate([v, (v[1:] + v[:-1]) / 2, rng.normal(size=5), [v.min() - 3, v.max() + 3]])
        cols.append(rng.choice(pool, size=n))
    return np.column_stack(cols), rng.integers(0, 2, size=n)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("seed", range(3))
def test_shard_scoring_equals_naive_counts(name: str, seed: int) -> None:
    rng = np.random.default_rng(300 + seed)
    S = _sample(rng, 14, 6)
    enum = _classes()[name].enumerate(S)
    X, y = _scoring_data(rng, S, 60)
    naive = (_labels(enum, X) != y[None, :]).sum(axis=1)
    for shard_size in (1, 3, 7, enum.size() + 5):
        shards = enum.shards(shard_size)
        assert shards[0].start == 0 and shards[-1].stop == enum.size()
        assert all(a.stop == b.start for a, b in zip(shards, shards[1:]))
        assert all(0 < s.stop - s.start <= shard_size for s in shards)
        scored = np.concatenate([enum.mistakes(s, X, y) for s in shards])
        assert scored.dtype == np.int64
        np.testing.assert_array_equal(scored, naive)
    assert enum.mistakes(Shard(0, 0), X, y).shape == (0,)
    empty_X = np.zeros((0, P))
    np.testing.assert_array_equal(enum.mistakes(Shard(0, enum.size()), empty_X, np.zeros(0)), 0)


@pytest.mark.parametrize("name", ALL)
def test_hypotheses_round_trip_through_json(name: str) -> None:
    S = _sample(np.random.default_rng(9), 12, 4)
    enum = _classes()[name].enumerate(S)
    X, _ = _scoring_data(np.random.default_rng(10), S, 50)
    models = _models() if name == "finite" else None
    for i in range(enum.size()):
        h = enum.hypothesis(i)
        d = json.loads(json.dumps(h.to_dict(), allow_nan=False))
        assert d["class"] in CLASSES
        np.testing.assert_array_equal(hypothesis_from_dict(d, models).predict(X), h.predict(X))
        assert h.predict(X).dtype == np.int8


def test_indices_outside_the_enumeration_are_rejected() -> None:
    enum = IntervalClass(0).enumerate(np.arange(4.0)[:, None])
    with pytest.raises(IndexError):
        enum.hypothesis(enum.size())
    with pytest.raises(IndexError):
        enum.mistakes(Shard(0, enum.size() + 1), np.zeros((1, 1)), np.zeros(1))
    with pytest.raises(ValueError):
        enum.shards(0)


def test_cuts_sit_at_midpoints_between_sample_values() -> None:
    S = np.array([[0.0], [1.0], [1.0], [3.0]])
    cuts = {ThresholdClass(0).enumerate(S).hypothesis(i).threshold for i in range(4)}
    assert cuts == {-np.inf, 0.5, 2.0, np.inf}
    huge = np.array([[-1e308], [1e308], [np.nextafter(1e308, np.inf)]])
    enum = ThresholdClass(0, "up").enumerate(huge)
    assert len(_as_set(_labels(enum, huge))) == enum.size() == 4


# --- ERM ------------------------------------------------------------------------------------

CONCEPTS: dict[str, tuple[dict, Callable[[np.ndarray], np.ndarray]]] = {
    "threshold": ({"features": [1]}, lambda X: X[:, 1] > 0.2),
    "interval": ({"features": [2]}, lambda X: (X[:, 2] >= -0.5) & (X[:, 2] <= 0.5)),
    "point": ({"features": [0]}, lambda X: X[:, 0] == 0.0),
    "stump": ({}, lambda X: X[:, 2] <= -0.3),
    "rectangle": ({"features": [0, 1]}, lambda X: (np.abs(X[:, 0]) <= 0.5) & (X[:, 1] > -0.5) & (X[:, 1] < 1.0)),
    "halfspace": ({"features": [1, 2]}, lambda X: X[:, 1] - 2 * X[:, 2] > 0.3),
    "finite": ({"models": _models()}, lambda X: X[:, 2] <= 0.1),
}


@pytest.mark.parametrize("name", sorted(CONCEPTS))
def test_erm_finds_the_true_concept_on_realizable_data(name: str) -> None:
    kwargs, concept = CONCEPTS[name]
    X = _sample(np.random.default_rng(11), 150, 6)
    y = concept(X).astype(int)
    erm = ERMClassifier(hypothesis=name, shard_size=50, **kwargs).fit(X, y)
    assert erm.mistakes_ == 0
    np.testing.assert_array_equal(erm.predict(X), y)
    Xt = _sample(np.random.default_rng(12), 200, 6)
    np.testing.assert_array_equal(erm.predict(Xt), concept(Xt).astype(int))  # same grid: generalises


@pytest.mark.parametrize("name", sorted(CONCEPTS))
@pytest.mark.parametrize("seed", range(2))
def test_erm_mistakes_equal_the_brute_force_minimum(name: str, seed: int) -> None:
    kwargs, _ = CONCEPTS[name]
    rng = np.random.default_rng(400 + seed)
    X = _sample(rng, 9, 4)
    y = rng.integers(0, 2, size=9)
    erm = ERMClassifier(hypothesis=name, shard_size=4, **kwargs).fit(X, y)
    cls = erm.hypothesis_class_
    grid = _grid_labels(name, cls, X, X)
    if name == "halfspace":
        f = list(cls.features)  # type: ignore[attr-defined]
        grid = np.array([s for s in itertools.product((0, 1), repeat=9) if _separable(X[:, f], np.array(s, bool))])
    assert erm.mistakes_ == int((grid != y[None, :]).sum(axis=1).min())
    assert erm.mistakes_ == int((erm.predict(X) != y).sum())


def test_erm_agrees_with_the_exact_learners() -> None:
    for seed in range(5):
        rng = np.random.default_rng(500 + seed)
        X, y = _sample(rng, 80, 9, p=4), rng.integers(0, 2, size=80)
        stump = StumpLearner().fit(X, y)
        assert ERMClassifier().fit(X, y).mistakes_ == int((stump.predict(X) != y).sum())
        assert ERMClassifier("threshold", [3]).fit(X, y).mistakes_ == best_threshold(X[:, 3], y)[2]


# --- errors and sizes -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        (("circle", 3), "--hypothesis 'circle' is unknown"),
        (("rectangle", 5), "--hypothesis rectangle needs exactly 2 features (choose them with --features); the data has 5"),
        (("threshold", 5), "--hypothesis threshold needs exactly 1 feature (choose it with --features)"),
        (("halfspace", 5, [0, 1, 2]), "--hypothesis halfspace needs exactly 2 features; --features chose 3"),
        (("interval", 5, [5]), "--features 5 is out of range: the data has 5 features"),
        (("stump", 5, [0, -1]), "--features -1 is out of range"),
        (("stump", 5, [1, 1]), "--features [1, 1] names a feature twice"),
        (("stump", 5, []), "--features chose no features"),
        (("finite", 5), "--hypothesis finite needs"),
    ],
)
def test_make_class_errors_are_one_line_and_name_the_option(args: tuple, needle: str) -> None:
    with pytest.raises(PcqrError) as info:
        make_class(*args)
    message = str(info.value)
    assert needle in message and "\n" not in message


def test_make_class_builds_every_class() -> None:
    assert make_class("rectangle", 2).features == (0, 1)  # type: ignore[attr-defined]
    assert make_class("threshold", 1).feature == 0  # type: ignore[attr-defined]
    assert make_class("stump", 4).features == (0, 1, 2, 3)  # type: ignore[attr-defined]
    assert make_class("halfspace", 6, [4, 1]).features == (4, 1)  # type: ignore[attr-defined]
    assert make_class("finite", 3, models=_models()).vc_dimension() == 4
    for name in CLASSES:
        cls = make_class(name, 2, [0] if name in ("threshold", "interval", "point") else None, models=_models() if name == "finite" else None)
        assert cls.name == name and cls.vc_dimension() >= 1
    assert [StumpClass(tuple(range(p))).vc_dimension() for p in (1, 2, 8)] == [2, 3, 6]


def test_non_finite_samples_are_rejected() -> None:
    with pytest.raises(PcqrError, match="NaN or infinite"):
        ThresholdClass(0).enumerate(np.array([[1.0], [np.nan]]))


def test_rectangles_and_halfspaces_at_sixty_points_are_fast() -> None:
    S = np.random.default_rng(13).normal(size=(60, 2))
    X, y = _scoring_data(np.random.default_rng(14), S, 500)
    for cls in (RectangleClass((0, 1)), HalfspaceClass((0, 1))):
        enum = cls.enumerate(S)
        shard = enum.shards(5000)[-1]
        scored = enum.mistakes(shard, X, y)
        naive = [(enum.hypothesis(i).predict(X) != y).sum() for i in range(shard.start, shard.stop, 97)]
        np.testing.assert_array_equal(scored[:: 97], naive)
