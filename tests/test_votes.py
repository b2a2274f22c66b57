"""Vote counters agree with the models they stand for: ct(1) = how many models predict 1."""
from __future__ import annotations

import numpy as np
from sklearn.linear_model import LogisticRegression

from pcqr.pipeline.models.votes import BLOCK_ROWS, Ensemble, LinearVotes


def test_linear_votes_in_blocks_equal_each_models_predict() -> None:
    rng = np.random.default_rng(0)
    models = []
    for j in range(12):
        X = rng.normal(size=(200, 4))
        models.append(LogisticRegression().fit(X, (X[:, j % 4] > 0.2 * j - 1).astype(int)))
    ensemble = Ensemble(models)
    assert isinstance(ensemble.counter, LinearVotes)
    queries = rng.normal(size=(2 * BLOCK_ROWS + 123, 4))  # three blocks, the last one short
    expected = sum(m.predict(queries).astype(np.int32) for m in models)
    assert (ensemble.count_ones(queries) == expected).all()


def test_a_score_exactly_on_the_boundary_votes_0_as_predict_does() -> None:
    counter = LinearVotes(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([-0.5, 0.25]))
    X = np.array([[0.5, -0.25], [0.5000001, -0.2499999], [0.0, 0.0]])
    assert list(counter(X)) == [0, 2, 1]  # 0.5 - 0.5 = 0 is not > 0; -0.25 + 0.25 neither
    assert counter(np.empty((0, 2))).shape == (0,)
