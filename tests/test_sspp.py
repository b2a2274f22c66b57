"""A_SSPP (pcqr learn / predict): the released classifier's accuracy, its artifact, bad input."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.hypotheses import hypothesis_from_dict, make_class
from pcqr.pipeline.mechanisms.sspp import cover_radius, semi_private_learner
from pcqr.pipeline.privacy.noise import SeededNoise
from tests.conftest import write_parquet

CUT, GAMMA = -0.2, 0.1


def _labelled(rows: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x = rng.normal(size=(rows, 1))
    return x, (x[:, 0] > CUT).astype(np.int8) ^ (rng.random(rows) < GAMMA).astype(np.int8)


def test_released_threshold_is_near_the_best(client) -> None:
    """n_pub = 1,000, n = 20,000, eps = 1: error within 0.03 of the best threshold in >= 95 of 100 runs."""
    fresh_x, fresh_y = _labelled(1_000_000, np.random.default_rng(99))
    best = np.mean((fresh_x[:, 0] > CUT).astype(np.int8) != fresh_y)
    hclass, good = make_class("threshold", 1), 0
    for seed in range(100):
        rng = np.random.default_rng(seed)
        public = rng.normal(size=(1000, 1))
        private = client.scatter(_labelled(20_000, rng))
        h_priv, candidates = semi_private_learner(client, hclass, public, [private], 1.0, SeededNoise(seed))
        assert candidates == 2 * 1000  # thresholds both directions on 1,000 distinct points
        good += int(np.mean(h_priv.predict(fresh_x) != fresh_y) - best <= 0.03)
    assert good >= 95


def test_cover_radius_solves_lemma_3_3() -> None:
    import math

    alpha = cover_radius(1000, 1, 0.05)
    assert 2 * (2 * math.e * 1000) ** 2 * math.exp(-alpha * 1000 / 4) == pytest.approx(0.05)


@pytest.fixture
def data(tmp_path):
    rng = np.random.default_rng(1)
    x, y = _labelled(5000, rng)
    write_parquet(str(tmp_path / "private/p.parquet"), {"x0": x[:, 0], "x1": rng.normal(size=5000), "label": y})
    write_parquet(str(tmp_path / "public/p.parquet"), {"x0": rng.normal(size=300), "x1": rng.normal(size=300)})
    q = rng.normal(size=(400, 2))
    write_parquet(str(tmp_path / "queries/p.parquet"), {"query_id": np.arange(400), "x0": q[:, 0], "x1": q[:, 1]})
    return tmp_path


def test_learn_then_predict(data, capsys, thread_cluster_yaml) -> None:
    model = data / "model.json"
    assert main(["learn", "--private", str(data / "private"), "--public", str(data / "public"),
                 "--hypothesis", "stump", "--epsilon", "1", "--out", str(model),
                 "--cluster", thread_cluster_yaml, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["public_points"] == 300 and summary["features"] == ["x0", "x1"]
    record = json.loads(model.read_text())
    hypothesis = hypothesis_from_dict(record["hypothesis"])  # loadable without any pcqr state
    assert main(["predict", str(model), str(data / "queries"), "--out", str(data / "pred"),
                 "--cluster", thread_cluster_yaml]) == 0
    predictions = pq.read_table(str(data / "pred"))
    queries = pq.read_table(str(data / "queries"))
    X = np.column_stack([queries.column("x0").to_numpy(), queries.column("x1").to_numpy()])
    assert predictions.column("query_id").to_pylist() == list(range(400))
    assert (predictions.column("prediction").to_numpy() == hypothesis.predict(X)).all()


@pytest.mark.parametrize(
    "case,needle",
    [("columns", "public columns do not match"), ("empty", "no rows"),
     ("finite", "--hypothesis finite needs a non-empty list"), ("epsilon", "--epsilon")],
)
def test_learn_bad_input(case, needle, data, capsys, thread_cluster_yaml) -> None:
    hypothesis, epsilon = "threshold", "1"
    if case == "columns":
        (data / "public/p.parquet").unlink()
        write_parquet(str(data / "public/p.parquet"), {"z": np.zeros(3)})
    elif case == "empty":
        (data / "public/p.parquet").unlink()
        write_parquet(str(data / "public/p.parquet"), {"x0": np.zeros(0), "x1": np.zeros(0)})
    elif case == "finite":
        hypothesis = "finite"
    else:
        epsilon = "0"
    code = main(["learn", "--private", str(data / "private"), "--public", str(data / "public"),
                 "--hypothesis", hypothesis, "--features", "x0", "--epsilon", epsilon,
                 "--out", str(data / "model.json"), "--cluster", thread_cluster_yaml])
    err = capsys.readouterr().err
    assert code != 0 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (data / "model.json").exists()
