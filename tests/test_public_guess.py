"""The public-guess gate (--gate guess): its parameters, its exact output distribution, its
privacy at small k (exact), the student's determinism, and the command line end to end."""
from __future__ import annotations

import dataclasses
import functools
import itertools
import math

import numpy as np
import pytest
from scipy import stats

from pcqr.jobs.cli import main
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.noise import SecureNoise, SeededNoise, discrete_laplace_pmf, session_key
from pcqr.pipeline.privacy.subsamp import GUESS_DISAGREEMENT, SubSampParameters
from pcqr.pipeline.gates.public_guess import (
    DOUBLING_FROM, STUDENT_ROWS, YOUNG, GuessSpec, Student, lagged_points, refit_points,
)
from pcqr.pipeline.public_log.replay import verify_log
from pcqr.pipeline.gates.sparse_vector import ANSWERED, REFUSED, SparseVector, SparseVectorState
from tests.conftest import P_FAIL, answer_two_ways, threshold_data, write_session_data


def small_guess_params(cutoff: int = 1, split: str = "equal") -> SubSampParameters:
    """k = 20, w = 0, lambda ~ 1.22 (scales 4.9 and 2.4 in vote-margin units; ``lyu_su_li``: 4.0 and 3.2)."""
    params = SubSampParameters.guess("paper", 8.0, 0.1, cutoff, 100, 0.1, subsamples=20)
    return dataclasses.replace(params, noise_split=split)


def _tail(a: int, scale: float) -> float:
    """P(Z >= a) for Z ~ DLap(scale), exactly (closed form)."""
    q = math.exp(-1 / scale)
    return q**a / (1 + q) if a >= 1 else 1 - q ** (1 - a) / (1 + q)


def _z2(params: SubSampParameters) -> np.ndarray:
    b2 = params.threshold_noise_scale
    return np.arange(-int(60 * b2) - 5, int(60 * b2) + 6)


def exact_transcript(params: SubSampParameters, margins: list[int], outcome: str) -> float:
    """P(one instance passes the first len(outcome) - 1 queries and ends the way ``outcome`` says):
    'P' = passed (g released, free), 'B' = bottom (1 - g released, the instance spent). The sum over
    the instance's threshold Z2 of P(Z2 = z) times each query's tail P(Z1 >= floor(2w + z) + 1 - margin)."""
    z2 = _z2(params)
    weights = discrete_laplace_pmf(z2, params.threshold_noise_scale)
    probability = np.ones(z2.shape)
    for margin, result in zip(margins, outcome):
        passed = _passed(params, margin)
        probability = probability * (passed if result == "P" else 1 - passed)
    return float((weights * probability).sum())


@functools.lru_cache(maxsize=None)
def _passed(params: SubSampParameters, margin: int) -> np.ndarray:
    """P(a query at ``margin`` passes | Z2 = z) at every z of ``_z2`` (the same few margins recur)."""
    first = [math.floor(2 * params.threshold + z) + 1 - margin for z in _z2(params)]
    return np.array([_tail(a, params.query_noise_scale) for a in first])


def test_guess_parameters_have_no_stability_term_and_far_fewer_models() -> None:
    """The tight profile at eps 1, T 50, m 2,000: the guess gate's lambda uses the whole delta and k
    is what a unanimous query needs, not a multiple of w (the stability gate's is thousands)."""
    guess = SubSampParameters.create("tight", 1.0, 1e-6, 50, 2000, 0.05, gate="guess")
    stability = SubSampParameters.create("tight", 1.0, 1e-6, 50, 2000, 0.05)
    terms = guess.delta_terms()
    assert guess.gate == "guess" and terms.stability == 0.0 and guess.guarantee() <= (1.0, 1e-6)
    # w: charge only when about GUESS_DISAGREEMENT of the models disagree with g (any w certifies)
    assert guess.threshold == math.floor(2 * guess.subsamples * (0.5 - GUESS_DISAGREEMENT)) / 2 == 0.0
    assert guess.threshold_source == "guess_disagreement"
    assert guess.lam <= stability.lam
    assert guess.subsamples < stability.useful_subsamples() / 3
    # the default k: a unanimous agreeing query is charged with probability at most T / 4m, and k - 1 is not enough
    assert guess.unanimous_abstention() <= 50 / (4 * 2000)
    from dataclasses import replace
    assert replace(guess, subsamples=guess.subsamples - 1).unanimous_abstention() > 50 / (4 * 2000)
    assert SubSampParameters.from_dict(guess.to_dict()) == guess
    old = stability.to_dict()
    del old["gate"]  # a state written before the gates
    assert SubSampParameters.from_dict(old).gate == "stability"
    with pytest.raises(PcqrError, match="--gate must be one of"):
        SubSampParameters.create("tight", 1.0, 1e-6, 50, 2000, 0.05, gate="vote")


@pytest.mark.parametrize("margin,guess_label", [(-4, 1), (0, 0), (0, 1), (6, 0)])  # each margin, each label
def test_guess_gate_output_distribution(guess_label: int, margin: int) -> None:
    """Empirical P(release g) on one query of fresh sessions (new key and thresholds each time, the
    real coordinator) matches the exact sum over Z2 (binomial test, false failure 1e-6); every other
    outcome releases 1 - g and spends the instance."""
    params = small_guess_params()
    k = params.subsamples
    agree = (k + margin) // 2  # ct(g)
    ones = np.array([agree if guess_label == 1 else k - agree])
    guess = np.array([guess_label])
    noise = SeededNoise(7 + margin + 100 * guess_label)
    trials, free = 20_000, 0
    for _ in range(trials):
        sv = SparseVector.create(params, noise)
        status, label, used = sv.process_guess(ones, guess, k)
        assert used == 1 and status[0] == ANSWERED
        free += int(label[0] == guess_label)
        assert sv.state.bottoms == int(label[0] != guess_label)
    expected = exact_transcript(params, [margin], "P")
    assert 0.05 < expected < 0.95
    assert stats.binomtest(free, trials, expected).pvalue > P_FAIL


@pytest.mark.parametrize("split", ["equal", "lyu_su_li"])
def test_guess_gate_is_eps0_dp_exactly_on_small_transcripts(split: str) -> None:
    """Each instance is eps0 = 2/lambda -DP, with Algorithm 5's split of eps0 and with Lyu-Su-Li's
    (threshold noise 1.29 lambda, query noise 1.63 lambda in distance units): for every transcript of
    one instance over three queries (PPP, PPB, PB, B) and every neighbouring vote vector (one model
    changes: each margin toward g moves by -2, 0 or +2), the exact probabilities' ratio is at most
    e^eps0 (and it is attained nearly, so the bound is not vacuous)."""
    params = small_guess_params(split=split)
    eps0 = params.instance_epsilon
    assert eps0 == pytest.approx(2 / params.lam, rel=1e-12)
    worst = 0.0
    for margins in itertools.product([-6, 0, 4], repeat=3):
        for shift in itertools.product([-2, 0, 2], repeat=3):
            moved = [m + d for m, d in zip(margins, shift)]
            for outcome in ("PPP", "PPB", "PB", "B"):
                p, q = (exact_transcript(params, list(v), outcome) for v in (margins, moved))
                worst = max(worst, math.log(p / q))
    assert worst <= eps0 * (1 + 1e-9)
    assert worst > 0.5 * eps0


def test_a_negative_threshold_charges_only_clear_disagreements() -> None:
    """Under the guess gate w may be negative (certified the same): at w = -k/4 and sharp noise, a
    query that 60% of the models disagree with releases g free; 90% disagreeing flips it."""
    params = SubSampParameters.guess("paper", 100.0, 0.1, 2, 10**6, 0.1, subsamples=1000, threshold=-250)
    assert params.delta_terms().stability == 0.0 and params.threshold == -250
    sv = SparseVector(params, SparseVectorState(0, 0, session_key(SecureNoise()), np.zeros(2, dtype=np.int64)))
    status, label, _ = sv.process_guess(np.array([400, 100]), np.array([1, 1]), 1000)  # ct(g) 400, then 100
    assert label.tolist() == [1, 0] and sv.state.bottoms == 1
    with pytest.raises(PcqrError, match="--threshold must be a number in"):
        SubSampParameters.guess("paper", 1.0, 1e-6, 2, 100, 0.1, threshold=float("nan"))
    with pytest.raises(PcqrError, match="--threshold must be a number in"):
        SubSampParameters.create("tight", 1.0, 1e-6, 2, 100, 0.1, threshold=-1.0)  # the stability gate: w >= 0


def test_flips_spend_instances_and_stop_at_bottom() -> None:
    """Sharp noise (eps 100): unanimous agreement releases g, unanimous disagreement releases 1 - g
    and spends one instance; ``stop_at_bottom`` returns right after the first flip; after T flips the
    rest are refused."""
    params = SubSampParameters.guess("paper", 100.0, 0.1, 2, 10**6, 0.1, subsamples=1000)
    sv = SparseVector(params, SparseVectorState(0, 0, session_key(SecureNoise()), np.zeros(2, dtype=np.int64)))
    ones = np.array([1000, 0, 1000, 0, 1000, 1000])
    guess = np.array([1, 1, 1, 0, 0, 1])  # agree, disagree, agree, agree, disagree, agree
    status, label, used = sv.process_guess(ones, guess, 1000, stop_at_bottom=True)
    assert used == 2 and label.tolist() == [1, 0] and sv.state.bottoms == 1 and sv.state.queries_seen == 2
    status, label, used = sv.process_guess(ones[2:], guess[2:], 1000)
    assert used == 4 and status.tolist() == [ANSWERED, ANSWERED, ANSWERED, REFUSED]
    assert label.tolist() == [1, 0, 1, 0] and sv.state.bottoms == 2 and sv.halted
    with pytest.raises(ValueError, match="one 0/1 label"):
        sv.process_guess(ones[:2], np.array([2, 0]), 1000)


def test_student_schedule_depends_on_released_labels_only() -> None:
    """The student refitted from the same released labels in any chunking (batch boundaries) that
    respects room() and young flips guesses the same and fits the same number of times."""
    points = list(refit_points())
    assert points[:16] == list(range(1, 17)) and all(b > a for a, b in zip(points, points[1:]))
    data = threshold_data(3000, seed=4)
    X = np.column_stack([data[f"x{i}"] for i in range(3)])
    y = data["label"].astype(np.int8)
    flips = np.zeros(3000, dtype=bool)
    flips[[0, 5, 40, 900, 1500]] = True
    spec = GuessSpec("student", {"name": "stump", "params": {}})
    students = []
    for cut in (7, 300):
        student, start = Student(spec), 0
        while start < 3000:
            room = student.room()
            end = min(3000, start + cut, start + (room or 3000))
            if student.young:
                hit = np.flatnonzero(flips[start:end])
                end = start + int(hit[0]) + 1 if hit.size else end
            student.learn(X[start:end], y[start:end], bool(flips[end - 1]))
            start = end
        students.append(student)
    assert students[0].fits == students[1].fits > 0
    assert (students[0].guess(X) == students[1].guess(X)).all()
    assert (students[0].guess(X) == y).mean() > 0.99  # a stump learns x0 > 0.1
    assert YOUNG < 3000


def _taught(spec: GuessSpec, X: np.ndarray, y: np.ndarray, flips: np.ndarray, cut: int, stop: int) -> Student:
    """A student taught the first ``stop`` labels in chunks of at most ``cut`` that respect room()
    and young flips (as GuessGate.release and Student.from_log chunk them)."""
    student, start = Student(spec), 0
    while start < stop:
        room = student.room()
        end = min(stop, start + cut, start + (room or stop))
        if student.young:
            hit = np.flatnonzero(flips[start:end])
            end = start + int(hit[0]) + 1 if hit.size else end
        student.learn(X[start:end], y[start:end], bool(flips[end - 1]))
        start = end
    return student


def test_a_lagged_refit_takes_over_at_the_next_point_whatever_the_chunks() -> None:
    """GuessSpec.refits 'lagged' (new sessions: the fits leave the coordinator's critical path): from
    the first point past YOUNG, the student fitted at a point is fitted in a thread and takes over at
    the next point, so between two points the guess is the in-place student's of the point before;
    below YOUNG nothing changes. Chunkings (batch boundaries) give the same guesses."""
    n = 6000
    data = threshold_data(n, seed=4)
    X = np.column_stack([data[f"x{i}"] for i in range(3)])
    y = (X[:, 0] + 0.3 * X[:, 1] > 0.1).astype(np.int8)  # a stump keeps learning the cut as labels come
    flips = np.zeros(n, dtype=bool)
    flips[[0, 5, 40, 900]] = True
    lagged = GuessSpec("student", {"name": "stump", "params": {}}, refits="lagged")
    in_place = GuessSpec("student", {"name": "stump", "params": {}})
    assert GuessSpec.from_dict(lagged.to_dict()) == lagged and "refits" not in in_place.to_dict()
    points = [p for p in lagged_points() if p <= n]
    late = [p for p in points if p > YOUNG]
    assert len(late) >= 6 and points == [p for p in refit_points() if p <= n]  # below DOUBLING_FROM: the same
    for stop in (YOUNG, late[0], late[0] + 7, late[1], late[2] - 1, late[2], late[3] + 100, late[5]):
        got = [_taught(lagged, X, y, flips, cut, stop) for cut in (7, 300)]
        assert (got[0].guess(X) == got[1].guess(X)).all(), stop
        fitted_at = max([p for p in points if p <= stop and p <= YOUNG] +
                        [earlier for earlier, later in zip(late, late[1:]) if later <= stop])
        expected = _taught(in_place, X, y, flips, n, fitted_at)  # in place at the point the model was fitted at
        assert (got[0].guess(X) == expected.guess(X)).all(), (stop, fitted_at)


def test_lagged_points_double_from_doubling_from_and_end_at_student_rows() -> None:
    points = list(lagged_points())
    early = [p for p in refit_points() if p < DOUBLING_FROM]
    assert points[:len(early)] == early and points[-1] == STUDENT_ROWS
    late = points[len(early):-1]
    assert late[0] >= DOUBLING_FROM and all(b == 2 * a for a, b in zip(late, late[1:])) and late[-1] < STUDENT_ROWS
    assert sum(p for p in points if p > YOUNG) < 2.8 * STUDENT_ROWS < 0.6 * sum(p for p in refit_points() if p > YOUNG)


def test_the_last_lagged_refit_takes_over_a_quarter_after_the_last_point(monkeypatch) -> None:
    """After the schedule's last point its student takes over at LAST_TAKEOVER, and nothing changes
    after that (a short schedule stands in for the real one, which ends near 200,000 labels)."""
    import pcqr.pipeline.gates.public_guess as public_guess

    for name in ("LAGGED_POINTS", "_POINTS"):  # the last takeover: 1750; the in-place reference alike
        monkeypatch.setattr(public_guess, name, (1, 2, 3, 1100, 1400))
    data = threshold_data(2500, seed=4)
    X = np.column_stack([data[f"x{i}"] for i in range(3)])
    y = (X[:, 0] + 0.3 * X[:, 1] > 0.1).astype(np.int8)
    flips = np.zeros(2500, dtype=bool)
    lagged = GuessSpec("student", {"name": "stump", "params": {}}, refits="lagged")
    in_place = GuessSpec("student", {"name": "stump", "params": {}})
    for stop, fitted_at in ((1399, 3), (1400, 1100), (1749, 1100), (1750, 1400), (2500, 1400)):
        student = _taught(lagged, X, y, flips, 300, stop)
        assert (student.guess(X) == _taught(in_place, X, y, flips, 2500, fitted_at).guess(X)).all(), stop
    assert _taught(lagged, X, y, flips, 300, 1700).room() == 50 and student.room() is None


def test_prior_guesses_the_more_frequent_released_label() -> None:
    student = Student(GuessSpec("prior"))
    X = np.zeros((5, 2))
    assert student.guess(X).tolist() == [0] * 5  # nothing released yet: 0
    student.learn(X[:3], np.array([1, 1, 0], dtype=np.int8), charged_last=False)
    assert student.guess(X).tolist() == [1] * 5
    student.learn(X[:2], np.array([0, 0], dtype=np.int8), charged_last=True)  # 2 ones, 3 zeros
    assert student.guess(X).tolist() == [0] * 5


TRAIN = ["--epsilon", "1", "--cutoff", "20", "--queries-max", "10000", "--gate", "guess"]


def test_guess_gate_end_to_end_is_deterministic_across_calls_and_batches(tmp_path, capsys, thread_cluster_yaml) -> None:
    """Two seeded sessions, equal in all but how they are asked: one answers queries A then B in two
    calls (the second with another batch size, so it rebuilds the student from the log), the other
    A and B in one call. The logs' answers and sources agree row for row; every answer is given,
    flips equal the instances spent and the log verifies."""
    summaries, log = answer_two_ways(tmp_path, capsys, thread_cluster_yaml, TRAIN, [])
    source = log.column("source").to_numpy(zero_copy_only=False)
    assert set(log.column("status").to_pylist()) == {"answered"}
    assert set(source) <= {"guess", "flipped"}
    last = summaries[-1]
    assert last["gate"] == "guess" and last["guess"] == "student" and last["delta_stability"] == 0.0
    assert last["flipped"] == int(np.count_nonzero(source == "flipped")) == last["budget_used"] < 20
    assert summaries[0]["flipped"] + summaries[1]["flipped"] == last["flipped"]
    truth = (log.column("x0").to_numpy() > 0.1).astype(int)
    assert (log.column("answer").to_numpy() == truth).mean() > 0.99
    assert verify_log(str(tmp_path / "log2")).ok


def test_guess_options_are_checked_before_anything_is_read(tmp_path, capsys, thread_cluster_yaml) -> None:
    write_session_data(tmp_path, rows=2000, queries=10)
    base = ["train", "--private", str(tmp_path / "private"), "--state", str(tmp_path / "st"),
            "--cluster", thread_cluster_yaml]
    cases = [
        (["--gate", "gnmax", "--guess", "prior"], "only the guess gate uses a guess"),
        (["--gate", "guess", "--mode", "agnostic", "--hypothesis", "threshold"], "--gate guess: --mode agnostic"),
        (["--gate", "guess", "--guess", str(tmp_path / "missing.json")], "not found"),
    ]
    for extra, message in cases:
        assert main([*base, *extra]) != 0
        err = capsys.readouterr().err
        assert message in err and not (tmp_path / "st" / "session.json").exists(), err


def test_python_api_offers_the_guess_gate(thread_cluster_yaml, tmp_path) -> None:
    """pcqr.PrivateClassifier(gate='guess'): every query answered (no NaN), mostly right; the
    session's status names the gate and counts the flips as the instances used."""
    import pcqr

    data = threshold_data(20_000, seed=11)
    X = np.column_stack([data[f"x{i}"] for i in range(3)])
    queries = threshold_data(1500, seed=12)
    Q = np.column_stack([queries[f"x{i}"] for i in range(3)])
    clf = pcqr.PrivateClassifier(epsilon=1, cutoff=20, queries_max=5000, gate="guess",
                                 state=str(tmp_path / "state"), cluster=thread_cluster_yaml, seed=3, insecure_seed=True)
    predicted = clf.fit(X, data["label"]).predict(Q)
    assert not np.isnan(predicted).any() and np.mean(predicted == queries["label"]) > 0.95
    from pcqr.pipeline.session.session import session_status

    status = session_status(str(tmp_path / "state"))
    assert status.gate == "guess" and status.flipped == status.used and status.answered == 1500


def test_audit_surface_runs_the_guess_gate() -> None:
    """pcqr.pipeline.audit.run_guess_gate: the released labels of independent sessions; a query every
    model agrees with releases g, one every model disagrees with releases 1 - g (sharp noise), and
    after T flips the rest are refused."""
    from pcqr.pipeline import audit

    params = audit.subsamp_parameters(100.0, 0.1, 1, 10, 1000, gate="guess")
    codes = audit.run_guess_gate(np.array([1000, 0, 1000]), np.array([1, 1, 1]), 1000, params, sessions=50)
    assert codes.shape == (50, 3)
    assert (codes[:, 0] == audit.ANSWERED_1).all() and (codes[:, 1] == audit.ANSWERED_0).all()
    assert (codes[:, 2] == audit.REFUSED).all()
    with pytest.raises(PcqrError, match="gate='guess'"):
        audit.run_guess_gate(np.array([1]), np.array([1]), 1000, audit.subsamp_parameters(100.0, 0.1, 1, 10, 1000), 1)


def test_sessions_registered_before_the_gates_still_match_the_ledger(tmp_path, thread_cluster_yaml) -> None:
    """The ledger's digest of a session's fixed parameters: a stability/paper session registered
    before `noise_split`, `gate` and `profile` existed (its params without them) still matches; the
    same digest does not match once the split or the gate is edited, and a guess session's digest
    covers its guess."""
    import dataclasses

    from pcqr.pipeline.session.book import fixed_digests
    from pcqr.pipeline.session.state import load_session

    write_session_data(tmp_path, rows=2000, queries=10)
    assert main(["train", "--private", str(tmp_path / "private"), "--state", str(tmp_path / "st"), "--epsilon", "100",
                 "--delta", "1e-3", "--cutoff", "5", "--subsamples", "20", "--profile", "paper",
                 "--cluster", thread_cluster_yaml]) == 0
    session = load_session(str(tmp_path / "st"))
    digests = fixed_digests(session)
    assert len(digests) == 4 and len(set(digests)) == 4  # now; before `noise_split`; `gate`; `profile` too
    split = dataclasses.replace(session, params=dataclasses.replace(session.params, noise_split="lyu_su_li"))
    assert not set(fixed_digests(split)) & set(digests)  # an edited split (thresholds drawn at the other scale)
    assert len(fixed_digests(split)) == 1  # a Lyu-Su-Li session was never registered without its split
    guess = dataclasses.replace(session, params=dataclasses.replace(session.params, gate="guess"),
                                guess={"kind": "prior", "learner": None, "model": None})
    assert not set(fixed_digests(guess)) & set(digests)
    assert len(fixed_digests(guess)) == 2  # now; before `noise_split` (never without its gate)
