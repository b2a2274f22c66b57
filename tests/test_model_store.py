"""Models on disk without pickle (issue 11): round trips give identical votes; crafted, foreign or
damaged model files are refused in one line naming the file, and nothing in them runs."""
from __future__ import annotations

import io
import os
import pickle
import zipfile
from types import SimpleNamespace

import numpy as np
import pytest

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.models.learners import ConstantModel, LearnerSpec, fit_subsample
from pcqr.pipeline.models.store import FORMAT, check_storable, dump_models, load_models_file
from pcqr.pipeline.session.state import MODELS_FILE, OLD_MODELS_FILE, load_models, save_models
from pcqr.pipeline.models.votes import Ensemble, LinearVotes, ModelVotes, StumpVotes

ALLOWED = ("tests.allowed_learner",)
K, FEATURES = 23, 3


def _ensemble(spec: LearnerSpec, k: int = K, features: int = FEATURES, seed: int = 0) -> Ensemble:
    """k - 2 fitted models and two constants (a one-class subsample's model)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(60 * k, features))
    y = (X[:, 0] + 0.5 * X[:, -1] > 0).astype(int)
    models = [fit_subsample(spec, X[j::k], y[j::k]) for j in range(k - 2)]
    return Ensemble([*models, ConstantModel(1), ConstantModel(0)])


def _write(tmp_path, data: bytes, name: str = MODELS_FILE) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _npz(**arrays: np.ndarray) -> bytes:
    sink = io.BytesIO()
    np.savez(sink, **arrays)
    return sink.getvalue()


def _arrays(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


SPECS = {
    "stump": (LearnerSpec("stump"), StumpVotes, "stump"),
    "threshold": (LearnerSpec("threshold", {"feature": 2}), StumpVotes, "stump"),
    "logistic": (LearnerSpec("sklearn.linear_model.LogisticRegression"), LinearVotes, "linear"),
    "tree": (LearnerSpec("sklearn.tree.DecisionTreeClassifier", {"max_depth": 3}), ModelVotes, "trees"),
    "naive_bayes": (LearnerSpec("sklearn.naive_bayes.GaussianNB"), ModelVotes, "skops"),
    "erm_interval": (LearnerSpec("pcqr.pipeline.hypotheses.ERMClassifier", {"hypothesis": "interval", "features": [0]}),
                     ModelVotes, "erm"),
    "erm_halfspace": (LearnerSpec("pcqr.pipeline.hypotheses.ERMClassifier", {"hypothesis": "halfspace", "features": [0, 2]}),
                      ModelVotes, "erm"),
    "allowed": (LearnerSpec("tests.allowed_learner.NearestMeanClassifier", {}, ALLOWED), ModelVotes, "skops"),
}


@pytest.mark.parametrize("name", list(SPECS))
def test_a_round_trip_gives_identical_votes(name: str, tmp_path) -> None:
    spec, counter, kind = SPECS[name]
    ensemble = _ensemble(spec)
    assert isinstance(ensemble.counter, counter)
    data = dump_models(ensemble)
    assert str(_arrays(data)["kind"]) == kind and b"\x80\x04\x95" not in data[:64]
    loaded = load_models_file(_write(tmp_path, data), K, FEATURES, ALLOWED)
    queries = np.random.default_rng(9).normal(size=(3000, FEATURES))
    assert loaded.size == K and isinstance(loaded.counter, counter)
    assert (loaded.count_ones(queries) == ensemble.count_ones(queries)).all()
    if isinstance(ensemble.counter, ModelVotes):  # model by model, the same predictions
        for before, after in zip(ensemble.counter.models, loaded.counter.models):
            same_type = type(after) is type(before) or (kind == "trees" and type(after).__name__ == "TreesHypothesis")
            assert same_type and (after.predict(queries) == before.predict(queries)).all()


def test_state_round_trip_and_an_old_pickle_is_refused_without_being_opened(tmp_path) -> None:
    session = SimpleNamespace(params=SimpleNamespace(subsamples=K, classes=2), features=["a", "b", "c"])
    ensemble = _ensemble(LearnerSpec("stump"))
    save_models(str(tmp_path), ensemble)
    assert sorted(os.listdir(tmp_path)) == [MODELS_FILE]
    queries = np.random.default_rng(1).normal(size=(100, FEATURES))
    assert (load_models(str(tmp_path), session).count_ones(queries) == ensemble.count_ones(queries)).all()

    os.remove(tmp_path / MODELS_FILE)
    touched = tmp_path / "touched"

    class Touch:  # unpickling calls open(touched, "w"): the file would appear
        def __reduce__(self):
            return open, (str(touched), "w")

    (tmp_path / OLD_MODELS_FILE).write_bytes(pickle.dumps(Touch()))
    with pytest.raises(PcqrError, match=f"{OLD_MODELS_FILE}: written by an older pcqr.*retrain"):
        load_models(str(tmp_path), session)
    (tmp_path / MODELS_FILE).write_bytes(pickle.dumps(Touch()))  # the same pickle under the new name
    with pytest.raises(PcqrError, match=f"{MODELS_FILE}: not a pcqr model file"):
        load_models(str(tmp_path), session)
    (tmp_path / MODELS_FILE).write_bytes(_npz(format=np.array(FORMAT), kind=np.array("stump"),
                                              feature=np.array([Touch()], dtype=object)))
    with pytest.raises(PcqrError, match="not a pcqr model file"):  # an object array inside the .npz
        load_models(str(tmp_path), session)
    assert not touched.exists()
    os.remove(tmp_path / MODELS_FILE)
    os.remove(tmp_path / OLD_MODELS_FILE)
    with pytest.raises(PcqrError, match=f"no trained models \\({MODELS_FILE} missing\\)"):
        load_models(str(tmp_path), session)


def _skops_with(attribute: object) -> bytes:
    ensemble = _ensemble(SPECS["naive_bayes"][0])
    ensemble.counter.models[0].extra_ = attribute  # type: ignore[attr-defined]
    return dump_models(ensemble)


def test_a_skops_file_holding_an_untrusted_type_is_refused(tmp_path) -> None:
    path = _write(tmp_path, _skops_with(os.system))
    with pytest.raises(PcqrError, match=f"{MODELS_FILE}: holds type posix.system, which is not a class under"):
        load_models_file(path, K, FEATURES, ALLOWED)
    import operator

    path = _write(tmp_path, _skops_with(operator.attrgetter("x")))
    with pytest.raises(PcqrError, match="holds type operator.attrgetter"):
        load_models_file(path, K, FEATURES)
    path = _write(tmp_path, dump_models(_ensemble(SPECS["allowed"][0])))
    with pytest.raises(PcqrError, match="holds type tests.allowed_learner.NearestMeanClassifier"):
        load_models_file(path, K, FEATURES)  # not listed by the operator: refused
    assert load_models_file(path, K, FEATURES, ALLOWED).size == K
    with pytest.raises(PcqrError, match="holds type tests.allowed_learner.NearestMeanClassifier"):
        load_models_file(path, K, FEATURES, ("tests.allowed",))  # a prefix is whole module names


@pytest.mark.parametrize("name", ["stump", "logistic", "tree", "erm_interval"])
def test_a_file_from_a_session_with_another_k_or_other_features_is_refused(name: str, tmp_path) -> None:
    spec = SPECS[name][0]
    path = _write(tmp_path, dump_models(_ensemble(spec)))
    with pytest.raises(PcqrError, match=f"{MODELS_FILE}: .*another session"):
        load_models_file(path, K + 1, FEATURES, ALLOWED)
    # a stump file knows only the features its models use: one on the last of 5 features
    wide = LearnerSpec("threshold", {"feature": FEATURES + 1}) if name == "stump" else spec
    path = _write(tmp_path, dump_models(_ensemble(wide, features=FEATURES + 2)))
    with pytest.raises(PcqrError, match=f"{MODELS_FILE}: .*features"):
        load_models_file(path, K, FEATURES, ALLOWED)


def _tampered(name: str, **changes: object) -> bytes:
    arrays = _arrays(dump_models(_ensemble(SPECS[name][0])))
    arrays.update({k: np.asarray(v) for k, v in changes.items()})
    return _npz(**arrays)


def _erm(edit) -> bytes:
    import json

    arrays = _arrays(dump_models(_ensemble(SPECS["erm_interval"][0])))
    records = json.loads(str(arrays["erm"]))
    edit(records[0])
    arrays["erm"] = np.array(json.dumps(records))
    return _npz(**arrays)


@pytest.mark.parametrize(
    "case,data,needle",
    [
        ("feature_out_of_range", lambda: _tampered("stump", feature=np.full(K, 3, dtype=np.int64)),
         "feature index 3 is out of range"),
        ("feature_negative", lambda: _tampered("stump", feature=np.full(K, -1, dtype=np.int64)),
         "feature index -1 is out of range"),
        ("threshold_nan", lambda: _tampered("stump", threshold=np.full(K, np.nan)), "a threshold is NaN"),
        ("polarity_2", lambda: _tampered("stump", polarity=np.full(K, 2, dtype=np.int8)), "neither 0 nor 1"),
        ("feature_float", lambda: _tampered("stump", feature=np.zeros(K)), "'feature' holds float64"),
        ("coef_inf", lambda: _tampered("logistic", coef=np.full((K, FEATURES), np.inf)), "not finite"),
        ("constant_label_5", lambda: _tampered("tree", constant=np.full(K, 5, dtype=np.int8)), "constant label"),
        ("tree_child_before_parent", lambda: _tampered("tree", left=_arrays(dump_models(_ensemble(SPECS["tree"][0])))[
            "left"].clip(max=0)), "a tree"),
        ("tree_feature_out_of_range", lambda: _tampered("tree", feature=np.full_like(
            _arrays(dump_models(_ensemble(SPECS["tree"][0])))["feature"], FEATURES)), "feature index 3"),
        ("tree_nodes_short", lambda: _tampered("tree", tree_nodes=np.ones(K - 2, dtype=np.int64)), "nodes"),
        ("tree_value_inf", lambda: _tampered("tree", value=np.full_like(
            _arrays(dump_models(_ensemble(SPECS["tree"][0])))["value"], np.inf)), "not finite"),
        ("erm_direction", lambda: _erm(lambda r: r["hypothesis"].update({"class": "threshold", "threshold": 0.0,
                                                                        "direction": "sideways"})),
         "direction must be 'up' or 'down'"),
        ("erm_feature", lambda: _erm(lambda r: r["hypothesis"].update(feature=7)), "feature index 7 is out of range"),
        ("erm_nan", lambda: _erm(lambda r: r["hypothesis"].update(low=float("nan"))), "holds NaN"),  # refused by the strict JSON reader
        ("erm_param", lambda: _erm(lambda r: r["params"].update(command="touch")), "malformed ERM model"),
        ("unknown_kind", lambda: _tampered("stump", kind="pickle"), "unknown kind 'pickle'"),
        ("other_format", lambda: _tampered("stump", format="pcqr-models/0"), "not a pcqr model file"),
        ("missing_array", lambda: _npz(format=np.array(FORMAT), kind=np.array("stump")), "no 'feature' array"),
        ("truncated", lambda: dump_models(_ensemble(SPECS["stump"][0]))[:300], "not a pcqr model file"),
        ("skops_garbage", lambda: _tampered("naive_bayes", skops=np.frombuffer(b"PK\x03\x04junk", np.uint8)),
         "not a pcqr model file (skops"),
    ],
)
def test_a_damaged_model_file_is_refused_in_one_line(case: str, data, needle: str, tmp_path) -> None:
    path = _write(tmp_path, data())
    with pytest.raises(PcqrError) as refused:
        load_models_file(path, K, FEATURES, ALLOWED)
    message = str(refused.value)
    assert message.startswith(path) and needle in message and "\n" not in message, message


def test_a_zip_member_that_is_not_an_array_is_refused(tmp_path) -> None:
    sink = io.BytesIO()
    with zipfile.ZipFile(sink, "w") as archive:
        archive.writestr("kind", b"stump")
    with pytest.raises(PcqrError, match="not an array"):
        load_models_file(_write(tmp_path, sink.getvalue()), K, FEATURES)


def test_a_learner_whose_models_cannot_be_loaded_back_is_refused_before_training() -> None:
    trial = LearnerSpec("tests.allowed_learner.NearestMeanClassifier", {}, ALLOWED).check(FEATURES, 100)
    check_storable(trial, FEATURES, ALLOWED)
    with pytest.raises(PcqrError, match="^--learner: a fitted tests.allowed_learner.NearestMeanClassifier cannot be"):
        check_storable(trial, FEATURES)


# --- through the command line: `pcqr answer` on a state whose model file was swapped ------------

def test_answer_refuses_another_sessions_or_a_pickled_model_file(tmp_path, capsys, thread_cluster_yaml) -> None:
    from pcqr.jobs.cli import main
    from tests.conftest import MECHANICS_PRIVACY, threshold_data, write_parquet

    write_parquet(str(tmp_path / "private/part-0.parquet"), threshold_data(5000, seed=1))
    q = threshold_data(300, seed=2)
    q.pop("label")
    write_parquet(str(tmp_path / "queries/part-0.parquet"), {"query_id": np.arange(300), **q})

    def cli(*args: str) -> tuple[int, list[str]]:
        code = main(list(args))
        return code, [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("dashboard:")]

    def train(state: str, *extra: str) -> None:
        code, err = cli("train", "--private", str(tmp_path / "private"), "--state", str(tmp_path / state),
                        "--cluster", thread_cluster_yaml, "--queries-max", "100000", *MECHANICS_PRIVACY, *extra)
        assert code == 0, err

    train("state")
    train("other_k", "--subsamples", "60")
    train("other_features", "--features", "x0,x1", "--learner", "sklearn.linear_model.LogisticRegression")
    models, touched = tmp_path / "state" / MODELS_FILE, tmp_path / "touched"

    class Touch:
        def __reduce__(self):
            return open, (str(touched), "w")

    cases = {
        "other_k": (lambda: models.write_bytes((tmp_path / "other_k" / MODELS_FILE).read_bytes()),
                    "holds 60 models, the session has k = 50"),
        "other_features": (lambda: models.write_bytes((tmp_path / "other_features" / MODELS_FILE).read_bytes()),
                           "the session has 3"),
        "pickle": (lambda: (models.unlink(), (tmp_path / "state" / OLD_MODELS_FILE).write_bytes(pickle.dumps(Touch()))),
                   f"{OLD_MODELS_FILE}: written by an older pcqr"),
    }
    session_before = (tmp_path / "state" / "session.json").read_bytes()
    for case, (swap, needle) in cases.items():
        swap()
        code, lines = cli("answer", "--state", str(tmp_path / "state"), "--queries", str(tmp_path / "queries"),
                          "--log", str(tmp_path / "log"), "--cluster", thread_cluster_yaml)
        assert code == 2 and len(lines) == 1 and lines[0].startswith("pcqr: error: "), (case, lines)
        assert needle in lines[0] and ("models." in lines[0]), (case, lines[0])
        assert not (tmp_path / "log").exists() or not os.listdir(tmp_path / "log"), case
    assert not touched.exists()
    assert (tmp_path / "state" / "session.json").read_bytes() == session_before


def test_skops_models_are_kept_in_chunks_and_one_archive_still_loads(tmp_path, monkeypatch) -> None:
    """Many skops models go in archives of SKOPS_CHUNK (skops' writer is quadratic in one archive's
    members); the chunks load back in order; a file of one archive (no skops_sizes, as written
    before) loads too; sizes that do not split the bytes are refused."""
    import skops.io

    from pcqr.pipeline.models import store

    monkeypatch.setattr(store, "SKOPS_CHUNK", 3)
    ensemble = _ensemble(SPECS["naive_bayes"][0])  # K - 2 fitted models: several chunks
    arrays = _arrays(dump_models(ensemble))
    assert len(arrays["skops_sizes"]) == -(-(K - 2) // 3) and arrays["skops_sizes"].sum() == arrays["skops"].size
    queries = np.random.default_rng(9).normal(size=(500, FEATURES))
    loaded = load_models_file(_write(tmp_path, dump_models(ensemble)), K, FEATURES)
    assert (loaded.count_ones(queries) == ensemble.count_ones(queries)).all()
    one = {**arrays, "skops": np.frombuffer(skops.io.dumps(ensemble.counter.models[:K - 2]), dtype=np.uint8)}
    del one["skops_sizes"]
    loaded = load_models_file(_write(tmp_path, _npz(**one), "one.npz"), K, FEATURES)
    assert (loaded.count_ones(queries) == ensemble.count_ones(queries)).all()
    bad = {**arrays, "skops_sizes": arrays["skops_sizes"] + 1}
    with pytest.raises(PcqrError, match="sizes do not split"):
        load_models_file(_write(tmp_path, _npz(**bad), "bad.npz"), K, FEATURES)


def test_a_skops_archive_is_bounded_by_its_declared_size(tmp_path) -> None:
    """A skops archive inside models.npz that declares 256 MiB from 256 KiB (a zip bomb) is refused from
    its zip directory (pcqr.pipeline.data.user_files.check_zip) before skops reads a byte of it."""
    sink = io.BytesIO()
    with zipfile.ZipFile(sink, "w", zipfile.ZIP_DEFLATED) as archive, \
            archive.open("schema.json", "w", force_zip64=True) as member:
        for _ in range(16):
            member.write(bytes(1 << 24))
    bomb = np.frombuffer(sink.getvalue(), np.uint8)
    path = _write(tmp_path, _tampered("naive_bayes", skops=bomb, skops_sizes=np.array([bomb.size], dtype=np.int64)))
    with pytest.raises(PcqrError, match=r"not a pcqr model file \(skops\): .*more than 64 times"):
        load_models_file(path, K, FEATURES, ALLOWED)


def _class_ensemble(classes: int = 5) -> Ensemble:
    """k - 2 trees over c classes, each fitted on a subsample holding two to c of them (its classes_
    skip some: the small subsamples of a rare class), and two constants."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(40 * K, FEATURES))
    y = np.argmax(X @ rng.normal(size=(FEATURES, classes)), axis=1)
    spec = LearnerSpec("sklearn.tree.DecisionTreeClassifier", {"max_depth": 4})
    models = []
    for j in range(K - 2):
        rows = np.arange(j, X.shape[0], K)
        kept = rows[y[rows] <= 1 + j % (classes - 1)]  # classes 0 .. 1 + j mod (c - 1): 2 to c of them
        models.append(fit_subsample(spec, X[kept], y[kept]))
    return Ensemble([*models, ConstantModel(classes - 1), ConstantModel(0)], classes)


def test_trees_over_c_classes_are_kept_as_node_arrays_and_vote_as_before(tmp_path) -> None:
    """Over c > 2 classes decision trees are stored as node arrays too (not skops: 800 trees were a
    17.9 MB file), each tree's class weights at its classes' columns: after the round trip each tree
    predicts the class it predicted, and the (n, c) counts are the ensemble's."""
    ensemble = _class_ensemble()
    fitted = ensemble.counter.models[:-2]
    assert {len(m.classes_) for m in fitted} == {2, 3, 4, 5}  # some trees saw only some of the classes
    data = dump_models(ensemble)
    assert str(_arrays(data)["kind"]) == "trees" and _arrays(data)["value"].shape[1] == 5
    loaded = load_models_file(_write(tmp_path, data), K, FEATURES, classes=5)
    queries = np.random.default_rng(9).normal(size=(3000, FEATURES))
    for before, after in zip(ensemble.counter.models, loaded.counter.models):
        assert (after.predict(queries) == before.predict(queries)).all()
    counts = loaded.count_classes(queries)
    assert counts.shape == (3000, 5) and (counts == ensemble.count_classes(queries)).all()
    assert (counts[:, 1:] > 0).any(axis=0).all()  # votes for classes above 1: the comparison can fail


@pytest.mark.parametrize("edit,needle", [
    (lambda a: a.update(value=a["value"][:, :4]), "nodes"),  # four classes' weights for a five-class session
    (lambda a: a.update(value=-a["value"]), "non-negative"),  # a negative weight could make an unseen class win
])
def test_a_damaged_c_class_tree_file_is_refused(edit, needle: str, tmp_path) -> None:
    arrays = _arrays(dump_models(_class_ensemble()))
    edit(arrays)
    path = _write(tmp_path, _npz(**arrays))
    with pytest.raises(PcqrError) as refused:
        load_models_file(path, K, FEATURES, classes=5)
    assert str(refused.value).startswith(path) and needle in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(PcqrError, match="a model file of another session"):  # not a two-class session's
        load_models_file(_write(tmp_path, dump_models(_class_ensemble()), "other.npz"), K, FEATURES)
