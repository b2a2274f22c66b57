"""Fixed per-query randomness and no timing channel (issue 10, Deliver 5 and 6).

* identical work: two sessions with the same public parameters and the same released pattern,
  but different private votes and thresholds, do exactly the same work (tail table size, stream
  words, loop iterations, windows);
* one transcript: a stream processed in one call, in many small batches, on the query-by-query
  path or on the vectorised path only, gives identical answers for one key and thresholds;
* the key and the thresholds are kept in the private state (session.json, thresholds.npy);
* SIGKILL and resume: a real ``pcqr answer`` killed at 20 random moments and resumed each time
  writes a log byte-identical to an uninterrupted run of the same session.

The only statistical assertion (that a gap of 0 abstains and a large gap is answered under
eps = 100) fails by chance with probability far below P_FAIL = 1e-6 (see ``sharp_params``).
"""
from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.noise import SecureNoise, SeededNoise
from pcqr.pipeline.privacy.subsamp import SubSampParameters
from pcqr.pipeline.gates.sparse_vector import ABSTAINED, ANSWERED, REFUSED, SparseVector, SparseVectorState
from pcqr.pipeline.session.state import SESSION_FILE, THRESHOLDS_FILE, SessionState, load_session, save_session
from tests.conftest import write_thread_cluster
from tests.fault_injection import PreloadedCli, cli_env, pcqr_command, sigkill_at_a_random_moment

K = 1000


def sharp_params(cutoff: int) -> SubSampParameters:
    """eps = 100, lambda ~ 0.2, w = 10: a query at gap 0 is answered, or one at gap >= 100 abstains,
    with probability below e^-25 (noise scales 0.8 and 0.4 in gap units, a margin of at least 21)."""
    return SubSampParameters.paper(100.0, 0.1, cutoff, 10**7, 0.1, subsamples=K, threshold=10.0)


BOTTOMS = [3, 5, 9, 10, 14, 40, 41, 700, 3000, 3015, 90_000, 150_000]  # dense, sparse, and in between
BATCHES = [1, 2, 50, 4000, 100_000, 60_000, 7]


def _run(sv: SparseVector, ones: np.ndarray) -> np.ndarray:
    statuses, start = [], 0
    for size in BATCHES:
        statuses.append(sv.process(ones[start : start + size], K)[0])
        start += size
    return np.concatenate(statuses)


def _work(sv: SparseVector) -> tuple:
    return (sv.tail.size, sv.stream.words_generated, sv.work, sv.state.bottoms, sv.state.queries_seen)


def test_identical_work_whatever_the_private_votes_and_thresholds() -> None:
    n = sum(BATCHES)
    params = sharp_params(cutoff=len(BOTTOMS) - 1)  # the last bottom halts the session
    rng = np.random.default_rng(1)
    unanimous = np.full(n, K)
    varied = (K + rng.integers(50, K // 2 + 1, size=n) * 2) // 2  # gaps 100 .. K, all answered
    for ones in (unanimous, varied):
        ones[BOTTOMS] = K // 2  # gap 0: abstains
    a = SparseVector.create(params, SecureNoise())
    b = SparseVector(params, SparseVectorState(0, 0, os.urandom(32), rng.integers(-8, 9, size=params.cutoff)))
    released = [_run(a, unanimous), _run(b, varied)]
    expected = np.full(n, REFUSED, dtype=np.int8)
    expected[: BOTTOMS[-2] + 1] = ANSWERED
    expected[BOTTOMS[:-1]] = ABSTAINED
    assert (released[0] == expected).all() and (released[1] == expected).all()
    assert _work(a) == _work(b)
    assert a.work.scalar_steps > 0 and a.work.stretches > 10 and a.work.windows > 0  # both paths ran
    # the counters do measure something: another released pattern, other work
    c = SparseVector.create(params, SecureNoise())
    moved = unanimous.copy()
    moved[BOTTOMS[3]], moved[BOTTOMS[3] + 100] = K, K // 2
    _run(c, moved)
    assert _work(c) != _work(a)


def _moderate() -> tuple[SubSampParameters, np.ndarray]:
    """A stream whose answers are genuinely random: some gaps spread over [0, 4w]."""
    params = SubSampParameters.paper(20.0, 0.01, 40, 10**6, 0.1, subsamples=1)
    k = int(4 * params.threshold) + 1
    params = SubSampParameters.paper(20.0, 0.01, 40, 10**6, 0.1, subsamples=k)
    rng = np.random.default_rng(3)
    ones = np.where(rng.random(30_000) < 0.5, k, 0)  # unanimous (mostly answered) ...
    near = rng.random(30_000) < 0.01  # ... and 1% anywhere in [0, k]: a bottom every ~200 queries
    ones[near] = rng.integers(0, k + 1, size=int(near.sum()))
    return params, ones


def _transcript(params: SubSampParameters, ones: np.ndarray, sizes: list[int]) -> tuple[np.ndarray, ...]:
    sv = SparseVector.create(params, SeededNoise(11))  # the same key and thresholds every time
    parts, start = [], 0
    for size in sizes:
        parts.append(sv.process(ones[start : start + size], params.subsamples))
        start += size
    assert start == ones.size
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
            np.array([sv.state.bottoms, sv.state.queries_seen, sv.work.scalar_steps]))


def test_one_transcript_whatever_the_batching_and_the_path(monkeypatch) -> None:
    import pcqr.pipeline.gates.sparse_vector as sv_module

    params, ones = _moderate()
    whole = _transcript(params, ones, [ones.size])
    assert np.count_nonzero(whole[0] == ABSTAINED) == params.cutoff  # it halts inside the stream
    assert 5000 < whole[2][1] < ones.size - 5000 and whole[2][2] > 0  # halts mid-stream
    rng = np.random.default_rng(4)
    sizes = rng.integers(1, 400, size=ones.size).tolist()
    cut = int(np.searchsorted(np.cumsum(sizes), ones.size))
    sizes = sizes[:cut] + [ones.size - sum(sizes[:cut])]
    batched = _transcript(params, ones, sizes)
    monkeypatch.setattr(sv_module, "_DENSE", 0)  # vectorised stretches only
    vectorised = _transcript(params, ones, [ones.size])
    monkeypatch.setattr(sv_module, "_DENSE", 10**9)  # after the first bottom: query by query for good
    monkeypatch.setattr(sv_module, "_SPARSE", 10**9)
    scalar = _transcript(params, ones, [ones.size])
    assert vectorised[2][2] == 0 and scalar[2][2] > 0.5 * whole[2][1]
    for other in (batched, vectorised, scalar):
        assert (other[0] == whole[0]).all() and (other[1] == whole[1]).all()
        assert (other[2][:2] == whole[2][:2]).all()


def test_seeded_sessions_repeat_and_secure_ones_do_not() -> None:
    params = _moderate()[0]  # T = 40 thresholds of scale 2 lambda ~ 8: two draws never all agree
    one, two = (SparseVector.create(params, SeededNoise(5)).state for _ in range(2))
    assert one.key == two.key and (one.thresholds == two.thresholds).all()
    one, two = (SparseVector.create(params, SecureNoise()).state for _ in range(2))
    assert one.key != two.key and not (one.thresholds == two.thresholds).all()


def test_key_and_thresholds_live_in_the_private_state(tmp_path) -> None:
    params = sharp_params(cutoff=7)
    sv = SparseVector.create(params, SecureNoise())
    session = SessionState(params=params, learner={}, features=["x0"], private_uri="p", private_rows=1, seed=None,
                      sparse_vector=sv.state)
    state = str(tmp_path / "state")
    save_session(state, session)
    stored = np.load(os.path.join(state, THRESHOLDS_FILE), allow_pickle=False)
    assert stored.dtype == np.int64 and (stored == sv.state.thresholds).all()
    first = os.stat(os.path.join(state, THRESHOLDS_FILE)).st_ino
    sv.process(np.array([K, K // 2]), K)
    save_session(state, session)  # a later commit does not rewrite the thresholds
    assert os.stat(os.path.join(state, THRESHOLDS_FILE)).st_ino == first
    loaded = load_session(state).sparse_vector
    assert (loaded.bottoms, loaded.queries_seen, loaded.key) == (1, 2, sv.state.key)
    assert (loaded.thresholds == sv.state.thresholds).all()
    np.save(os.path.join(state, THRESHOLDS_FILE), stored[:3])
    with pytest.raises(PcqrError, match="expected"):
        load_session(state)
    path = os.path.join(state, SESSION_FILE)
    data = json.loads(Path(path).read_text())
    data["sparse_vector"] = {"bottoms": 0, "threshold_noise": 4, "queries_seen": 0}  # before issue 10
    Path(path).write_text(json.dumps(data))
    with pytest.raises(PcqrError, match="predates"):
        load_session(state)


# ---------------------------------------------------------------- SIGKILL and resume

# Batches of 50: 800 commits, so a run outlasts the kills (at 200 a faster answer loop finished
# 40,000 queries within 5 kills on a clean CI run; at 50 all 20 are used, 11 inside the loop; with
# runs forked after their imports, still all 20, 11 inside the loop, 26,600 queries done, quiet machine;
# issue 27 cut the stream to 32,000 for the suite's time: the guard below still needs 8 kills).
KILLS, QUERIES, BATCH = 20, 32_000, 50


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    """A session whose answers are random (eps 50, T 100, k 500, the paper profile's larger noise: it
    halts after about half the stream; the tight profile's lambda 2.97 would halt near its end, so
    whether it halts at all would be chance), trained without a seed: its randomness is the secure
    key and thresholds in its state."""
    root = tmp_path_factory.mktemp("fixed")
    cluster = Path(write_thread_cluster(root))
    assert main(["generate", "--kind", "realizable", "--rows", "100000", "--features", "3", "--queries",
                 str(QUERIES), "--seed", "2", "--out", str(root / "data"), "--cluster", str(cluster)]) == 0
    assert main(["train", "--private", str(root / "data" / "private"), "--state", str(root / "state"),
                 "--epsilon", "50", "--cutoff", "100", "--subsamples", "500", "--queries-max", "100000",
                 "--profile", "paper", "--learner", "stump", "--cluster", str(cluster)]) == 0
    return root, cluster


def _answer(root: Path, cluster: Path, state: str, log: str) -> list[str]:
    return ["answer", "--state", str(root / state), "--queries", str(root / "data" / "queries"),
            "--log", str(root / log), "--batch-size", str(BATCH), "--cluster", str(cluster), "--json",
            "--after-halt", "refuse"]  # refusals after the halt, as drawn: the student's determinism is test_distill's


def _batches(log: Path) -> list[str]:
    return sorted(n for n in os.listdir(log) if n.startswith("batch-")) if log.exists() else []


@pytest.mark.slow
def test_sigkill_and_resume_release_what_an_uninterrupted_run_does(trained) -> None:
    """Secure noise, not a seed: with a seed even the old code (fresh draws from a saved PCG state)
    would repeat itself; here only the fixed key and thresholds can make the two logs agree."""
    root, cluster = trained
    shutil.copytree(root / "state", root / "state-ref")  # the same session, before any answer
    # ... with a copy of the ledger, its authority (a state copied alone is refused once the other
    # copy has committed: tests/test_budget_authority.py)
    with closing(sqlite3.connect(os.environ["PCQR_LEDGER"])) as ledger, \
            closing(sqlite3.connect(root / "ledger-ref.sqlite")) as copy:
        ledger.backup(copy)
    assert main([*_answer(root, cluster, "state-ref", "log-ref"), "--ledger", str(root / "ledger-ref.sqlite")]) == 0
    argv = _answer(root, cluster, "state", "log")
    env = cli_env()
    rng = random.Random(20261123)
    kills = in_loop = 0
    with PreloadedCli(env, "answer") as cli:
        for _ in range(KILLS):
            waited, killed = sigkill_at_a_random_moment(cli, argv, rng, lambda: len(_batches(root / "log")))
            in_loop += waited
            kills += killed
            if json.loads((root / "state" / SESSION_FILE).read_text())["input"]["done"] >= QUERIES:
                break
    # The run may finish before KILLS tries (a fast machine gets through batches between kills):
    # at least 8 kills, 5 of them inside the answer loop, keeps the test meaningful.
    assert kills >= 8 and in_loop >= 5, (kills, in_loop)
    if json.loads((root / "state" / SESSION_FILE).read_text())["input"]["done"] < QUERIES:
        # a new process (a complete input is asked again)
        done = subprocess.run(pcqr_command(argv), capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
    names = _batches(root / "log-ref")
    assert len(names) == QUERIES // BATCH and _batches(root / "log") == names
    for name in names:
        assert (root / "log" / name).read_bytes() == (root / "log-ref" / name).read_bytes(), name
    states = [json.loads((root / s / SESSION_FILE).read_text()) for s in ("state", "state-ref")]
    assert states[0]["sparse_vector"] == states[1]["sparse_vector"]
    assert states[0]["sparse_vector"]["bottoms"] == 100  # the session did halt: the answers were random
