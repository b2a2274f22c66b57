"""An API that speaks Python (issue 47, item 6): every parameter of ``pcqr.PrivateClassifier`` (and of
``pcqr.Session``) is checked in ``fit`` before any row is written or any budget charged, and refused in
one line in its Python name; refusals from the planner and the session spell parameters as keywords,
not as the command line's options; a failure after the charge refunds it; the one-class warning is a
``Warning``; an estimator's charge is labelled for a person, its parameters bounded in size.

Each reproduction of the issue is a test here, and each was seen failing on the code before the change."""
from __future__ import annotations

import json
import logging
import math
import os
import warnings
from typing import Any

import numpy as np
import pytest

import pcqr
from pcqr.pipeline.budget.ledger import Ledger
from tests.hostile_world import ledger_rows

SEED = {"seed": 3, "insecure_seed": True}  # tests only: reproducible, marked NOT private
QUICK = {"epsilon": 100.0, "delta": 1e-3, "cutoff": 5, "subsamples": 3, **SEED}  # a session in about a second


@pytest.fixture
def ledger(tmp_path, monkeypatch) -> str:
    """A ledger of the test's own ($PCQR_LEDGER, as a user sets it)."""
    path = str(tmp_path / "ledger.sqlite")
    monkeypatch.setenv("PCQR_LEDGER", path)
    return path


@pytest.fixture
def cluster(thread_cluster_yaml) -> str:
    return thread_cluster_yaml


def _data(n: int, seed: int, features: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, features))
    return X, (X[:, 0] > 0.1).astype(int)


def _charges(path: str) -> list[dict[str, Any]]:
    """Every charge in the ledger, refunded or not."""
    if not os.path.exists(path):
        return []
    with Ledger(path) as book:
        return [c for identity in sorted(book.store.identities()) for c in book.store.charges(identity)]


# --- every parameter checked in fit, in its Python name, before anything is written or charged ---------

HOSTILE = [
    ({"queries_max": 1.5}, "queries_max=1.5: expected a whole number in [1, 2^53]"),  # charged, then a TypeError
    ({"epsilon": "1"}, "epsilon='1': expected a number in (0, 700]"),  # a raw TypeError
    ({"epsilon": math.nan}, "epsilon=nan: expected a number in (0, 700]"),
    ({"epsilon": True}, "epsilon=True: expected a number"),  # a bool is not a number
    ({"delta": "1e-6"}, "delta='1e-6': expected a number"),
    ({"fallback_label": 2}, "fallback_label=2: expected 0 or 1 (one of classes_, [0, 1])"),  # predict returned 2.0
    ({"fallback_label": -7.5}, "fallback_label=-7.5: expected 0 or 1"),  # charged, then an ArrowInvalid
    ({"fallback_label": True}, "fallback_label=True: expected 0 or 1"),
    ({"fallback_label": 1.0}, "fallback_label=1.0: expected 0 or 1"),
    ({"cutoff": True}, "cutoff=True: expected a whole number in [1, 1,000,000]"),
    ({"cutoff": 0}, "cutoff=0: expected a whole number"),
    ({"labels": 0}, "labels=0: expected a whole number"),  # said '--labels (M)'
    ({"subsamples": 2.0}, "subsamples=2.0: expected a whole number"),
    ({"batch_size": 0}, "batch_size=0: expected a whole number in [1, 10,000,000]"),
    ({"gate": "nope"}, "gate='nope': expected one of 'stability', 'guess', 'gnmax'"),
    ({"profile": "loose"}, "profile='loose': expected one of 'tight', 'paper'"),
    ({"after_halt": "never"}, "after_halt='never': expected one of 'refuse', 'student'"),
    ({"allow_private_overlap": "yes"}, "allow_private_overlap='yes': expected True or False"),
    ({"insecure_seed": 1, "seed": 3}, "insecure_seed=1: expected True or False"),
    ({"seed": -1, "insecure_seed": True}, "seed=-1: expected a whole number in [0, "),
    ({"learner": 3}, "learner=3: expected a string"),
    ({"learner_params": ["max_depth"]}, "learner_params=['max_depth']: expected a dict"),
    ({"state": 7}, "state=7: expected a path"),
    ({"name": "churn\nPrivateClassifier(other)"}, "name='churn\\nPriva...sifier(other)': expected a string of "
                                                  "1 to 200 characters, no control characters"),  # repr: one line
    ({"name": "churn \u202e"}, "name='churn \\u202e': expected a string of 1 to 200"),
    ({"name": "n" * 201}, "name='nnnnnn"),
    ({"name": ""}, "name='': expected a string of 1 to 200"),
    # the public class list (issue 49): checked before the labels are read
    ({"classes": list(range(101))}, "classes=[0, 1, 2, 3, 4, 5, ...]: expected a list of 2 to 100 distinct labels"),
    ({"classes": "01"}, "classes='01': expected a list of 2 to 100 distinct labels"),
    ({"classes": [0, 0]}, "classes=[0, 0]: expected a list of 2 to 100 distinct labels"),
    ({"classes": [0, "1"]}, "classes=[0, '1']: expected a list of 2 to 100 distinct labels"),
    ({"classes": [math.nan, 1]}, "classes=[nan, 1]: expected a list of 2 to 100 distinct labels"),
    ({"classes": [{"a": 1}, 2]}, "classes=[{'a': 1}, 2]: expected a list of 2 to 100 distinct labels"),
    ({"classes": {0: "no", 1: "yes"}}, "classes={0: 'no', 1: 'yes'}: expected a list"),
    ({"classes": [3, 4], "fallback_label": 5}, "fallback_label=5: expected one of classes_ [3, 4]"),
    ({"classes": ["a\nb", "c"], "fallback_label": "a"}, "fallback_label='a': expected one of classes_ "
                                                         "['a\\nb', 'c']"),  # repr: one line
]


@pytest.mark.parametrize("bad,needle", HOSTILE, ids=[f"{','.join(b)}={list(b.values())[0]!r}"[:30] for b, _ in HOSTILE])
def test_a_bad_parameter_is_refused_in_its_python_name_before_anything_is_written_or_charged(
        bad, needle, ledger, cluster, tmp_path) -> None:
    X, y = _data(400, 1)
    clf = pcqr.PrivateClassifier(**{**QUICK, "state": str(tmp_path / "state"), "cluster": cluster, **bad})
    with pytest.raises(pcqr.PcqrError) as refused:
        clf.fit(X, y)
    message = str(refused.value)
    assert message.startswith("PrivateClassifier: ") and needle in message and "\n" not in message, message
    assert "--" not in message
    assert not (tmp_path / "state").exists() and not os.path.exists(ledger)  # nothing written, nothing charged
    assert not hasattr(clf, "state_")


def test_numpy_scalars_are_numbers(ledger, cluster) -> None:
    """A NumPy integer is an integer and a NumPy float a number (numbers.Integral / numbers.Real): taken
    as the Python value (np.int64 cutoff was refused deep in the accountant: 'got 5')."""
    X, y = _data(600, 4)
    clf = pcqr.PrivateClassifier(epsilon=np.float32(100), delta=np.float64(1e-3), cutoff=np.int64(5),
                                 subsamples=np.int32(3), queries_max=np.int64(1000), fallback_label=np.int64(0),
                                 batch_size=np.int64(100), seed=np.int64(3), insecure_seed=np.bool_(True),
                                 learner="stump", cluster=cluster)
    predicted = clf.fit(X, y).predict(X[:20])
    assert set(np.unique(predicted)) <= {0.0, 1.0}
    (charge,) = [c for c in _charges(ledger) if c["refunded"] is None]
    assert (charge["epsilon"], charge["parameters"]["cutoff"], charge["parameters"]["subsamples"]) == (100.0, 5, 3)


def test_predict_checks_what_set_params_changed_after_fit(ledger, cluster) -> None:
    """fallback_label=2 made predict return 2.0 while classes_ is [0, 1]: refused before any answer."""
    X, y = _data(600, 4)
    clf = pcqr.PrivateClassifier(**QUICK, cluster=cluster).fit(X, y)
    answered = ledger_rows(ledger)
    clf.set_params(fallback_label=2)
    with pytest.raises(pcqr.PcqrError, match=r"^PrivateClassifier: fallback_label=2: expected 0 or 1"):
        clf.predict(X[:20])
    clf.set_params(fallback_label=0)
    predicted = clf.predict(_data(30, 5)[0])
    assert set(np.unique(predicted)) <= {0.0, 1.0} and set(clf.classes_) == {0, 1}
    assert ledger_rows(ledger)["charges"] == answered["charges"]  # predict charges nothing


# --- refusals below the estimator spell parameters as Python keywords ----------------------------------

@pytest.mark.parametrize("bad,needles", [
    ({"epsilon": 1e-9, "subsamples": None}, ("epsilon=1e-09 with cutoff=5 and delta=0.001",
                                               "the smallest epsilon that fits is")),
    ({"labels": 100, "queries_max": 500}, ("labels=M replaces queries_max",)),
    ({"gate": "gnmax", "cutoff": 7, "queries_max": 300, "subsamples": None}, ("cutoff=7: gate=gnmax spends one unit",
                                                                            "leave cutoff out")),
])
def test_a_refusal_from_the_planner_names_the_keywords(bad, needles, ledger, cluster, tmp_path) -> None:
    X, y = _data(2000, 1)
    with pytest.raises(pcqr.PcqrError) as refused:
        pcqr.PrivateClassifier(**{**QUICK, "cluster": cluster, **bad}).fit(X, y)
    message = str(refused.value)
    assert all(n in message for n in needles) and "--" not in message, message
    assert ledger_rows(ledger).get("charges", []) == []


def test_the_misuse_guard_says_allow_private_overlap_true(ledger, cluster, tmp_path) -> None:
    """Private rows asked into a public log: refused naming the keyword that accepts them."""
    X, y = _data(2000, 1)
    clf = pcqr.PrivateClassifier(**QUICK, log=str(tmp_path / "public-log"), cluster=cluster).fit(X, y)
    with pytest.raises(pcqr.PcqrError) as refused:
        clf.predict(X[:300])
    message = str(refused.value)
    assert "holds private rows" in message and "pass allow_private_overlap=True if this is intended" in message
    assert "--" not in message.replace(str(tmp_path), ""), message


def test_session_speaks_python_too(ledger, cluster, tmp_path) -> None:
    X, y = _data(600, 4)
    clf = pcqr.PrivateClassifier(**QUICK, state=str(tmp_path / "state"), cluster=cluster).fit(X, y)
    with pytest.raises(pcqr.PcqrError, match=r"^Session.create: epsilon='1': expected a number"):
        pcqr.Session.create(str(tmp_path / "s2"), str(tmp_path / "private"), epsilon="1")
    with pytest.raises(pcqr.PcqrError, match=r"^Session.create: queries_max=1.5: expected a whole number"):
        pcqr.Session.create(str(tmp_path / "s2"), str(tmp_path / "private"), queries_max=1.5)
    assert not (tmp_path / "s2").exists()
    with pytest.raises(pcqr.PcqrError, match=r"^state=\S+nothing-here: no session here"):
        pcqr.Session.open(str(tmp_path / "nothing-here"))
    with pcqr.Session.open(clf.state_, cluster=cluster) as session:
        with pytest.raises(pcqr.PcqrError, match=r"^Session.answer: fallback_label=2: expected 0 or 1"):
            session.answer(X[:10], fallback_label=2)
        with pytest.raises(pcqr.PcqrError, match=r"^Session.answer: batch_size=0.5: expected a whole number"):
            session.answer(X[:10], batch_size=0.5)
        assert session.status().answered == 0
    with pytest.raises(pcqr.PcqrError, match=r"^state=\S+ already holds a session; use a new directory"):
        pcqr.Session.create(clf.state_, str(tmp_path / "private"), cluster=cluster)


def test_the_command_line_keeps_its_options_and_python_its_keywords() -> None:
    """One mechanism: the spelling follows the face the call came through (a context variable)."""
    from pcqr.pipeline.spelling import python_spelling, spelled, spelled_with

    assert (spelled("--labels (M)"), spelled_with("--epsilon", 0.5)) == ("--labels (M)", "--epsilon 0.5")
    assert spelled("--allow-private-overlap") == "--allow-private-overlap"
    assert spelled("Algorithm 5's") == "Algorithm 5's"  # not an option: as it is
    with python_spelling():
        assert (spelled("--labels (M)"), spelled_with("--epsilon", 0.5)) == ("labels (M)", "epsilon=0.5")
        assert spelled("--allow-private-overlap") == "allow_private_overlap=True"
        assert spelled("--learner-param") == "learner_params" and spelled_with("--queries-max", 7) == "queries_max=7"
    assert spelled("--cutoff") == "--cutoff"  # back to the command line's after the block


def test_pcqr_train_still_says_the_option(tmp_path, thread_cluster_yaml, capsys, ledger) -> None:
    from pcqr.jobs.cli import main

    data = str(tmp_path / "data")
    assert main(["generate", "--kind", "realizable", "--rows", "500", "--features", "3", "--queries", "10",
                 "--seed", "1", "--out", data, "--cluster", thread_cluster_yaml]) == 0
    capsys.readouterr()
    assert main(["train", "--private", f"{data}/private", "--state", str(tmp_path / "st"), "--labels", "0",
                 "--cluster", thread_cluster_yaml]) == 2
    assert "--labels (M) must be between 1 and" in capsys.readouterr().err


# --- a failure after the charge refunds it -------------------------------------------------------------

@pytest.mark.parametrize("where", ["pcqr.pipeline.session.planning.train_session",
                                   "pcqr.pipeline.session.state.save_session"])
def test_a_failure_after_the_charge_refunds_it(where, ledger, cluster, monkeypatch, tmp_path) -> None:
    X, y = _data(600, 4)
    pcqr.PrivateClassifier(**QUICK, cluster=cluster).fit(X, y)  # a first fit: the ledger has spent (100, 1e-3)
    before = ledger_rows(ledger)

    def injected(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("injected after the charge")

    monkeypatch.setattr(where, injected)
    clf = pcqr.PrivateClassifier(**QUICK, state=str(tmp_path / "state"), cluster=cluster)
    with pytest.raises(RuntimeError, match="injected after the charge") as failed:
        clf.fit(X, y)
    assert any("charge refunded" in note for note in getattr(failed.value, "__notes__", []))
    assert ledger_rows(ledger)["charges"] == before["charges"]  # the second charge was refunded: spent unchanged
    assert len(_charges(ledger)) == 2 and _charges(ledger)[1]["refunded"] is not None
    assert not hasattr(clf, "state_")


# --- warnings through warnings -------------------------------------------------------------------------

def test_the_one_class_warning_is_a_warning_that_filterwarnings_silences(ledger, cluster, caplog) -> None:
    """300 rows at epsilon 8 and the default k give each model 1-2 rows: OneClassWarning, once per fit,
    through warnings (not the pcqr logger), so a notebook can silence it."""
    X, y = _data(300, 6)
    with caplog.at_level(logging.INFO, logger="pcqr"), pytest.warns(pcqr.OneClassWarning,
                                                                     match="see one class only") as caught:
        pcqr.PrivateClassifier(epsilon=8, cluster=cluster, **SEED).fit(X, y)
    assert sum(issubclass(w.category, pcqr.OneClassWarning) for w in caught) == 1
    assert issubclass(pcqr.OneClassWarning, UserWarning) and "rows to learn from" not in caplog.text
    with warnings.catch_warnings(record=True) as silenced:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=pcqr.OneClassWarning)
        pcqr.PrivateClassifier(epsilon=8, cluster=cluster, **SEED).fit(X, y)
    assert not [w for w in silenced if issubclass(w.category, pcqr.OneClassWarning)]
    # the API's own warnings point at the caller's line, not into pcqr
    assert [w.filename for w in silenced if issubclass(w.category, pcqr.PrivacyCostWarning)] == [__file__]


# --- the charge a person can read later ----------------------------------------------------------------

def test_the_charge_is_labelled_by_the_estimator_its_shape_and_name(ledger, cluster) -> None:
    """It was the deleted temporary path of the rows; the parameters listed every column."""
    X, y = _data(2000, 1, features=10)
    pcqr.PrivateClassifier(**QUICK, name="churn model", cluster=cluster).fit(X, y)
    X2, y2 = _data(1500, 2, features=10)  # other rows: its charge is not also the first's
    pcqr.PrivateClassifier(**QUICK, cluster=cluster).fit(X2, y2)
    labels = [c["label"] for c in _charges(ledger)]
    assert sorted(labels) == ["PrivateClassifier 1500x10 (rows x features)",
                              "PrivateClassifier(churn model) 2000x10 (rows x features)"]


def test_a_fit_on_a_thousand_columns_records_a_bounded_charge(ledger, cluster) -> None:
    """The charge's parameters named every column (10,000 columns: every name in the ledger's row)."""
    X, y = _data(200, 2, features=1000)
    pcqr.PrivateClassifier(**QUICK, learner="stump", cluster=cluster).fit(X, y)
    (charge,) = _charges(ledger)
    assert charge["label"] == "PrivateClassifier 200x1000 (rows x features)"
    recorded = json.dumps(charge["parameters"])
    assert len(recorded) < 1000 and "x999" not in recorded
    assert "x0,x1,x2,x3,x4,x5,x6,x7,... (1,000 features)" in recorded


def test_a_probability_out_of_range_is_named_by_its_keyword() -> None:
    """check_fraction (delta, alpha, beta) spells the keyword to a Python caller, the option otherwise."""
    from pcqr.pipeline.privacy.subsamp import check_fraction
    from pcqr.pipeline.spelling import python_spelling

    with pytest.raises(pcqr.PcqrError, match=r"^--beta must be in \(0, 1\)"):
        check_fraction(1.5, "--beta")
    with python_spelling(), pytest.raises(pcqr.PcqrError, match=r"^beta must be in \(0, 1\)"):
        check_fraction(1.5, "--beta")
