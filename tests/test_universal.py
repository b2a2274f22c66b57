"""A_UnvPrivCl (``pcqr answer --mode universal``): parameters, the switch to h_priv, resume, bad input."""
from __future__ import annotations

import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.em_sampler import total_variation
from pcqr.pipeline.mechanisms.universal import RELEASED_MODEL_FILE
from pcqr.pipeline.privacy.universal_parameters import UniversalParameters, public_queries
from pcqr.pipeline.models.released import load_model
from tests.conftest import write_parquet, write_thread_cluster

GAMMA, ALPHA, ROWS, QUERIES = 0.1, 0.1, 400_000, 6_000


def test_public_queries_is_step_1_of_algorithm_4() -> None:
    assert public_queries(1, 0.1, 0.05) == math.ceil(32 * (math.log(10) + math.log(20)) / 0.1)
    assert public_queries(2, 0.1, 0.05) == 2433
    assert public_queries(2, 0.05, 0.05) > public_queries(2, 0.1, 0.05)


def test_budget_is_split_and_the_whole_run_is_certified() -> None:
    params = UniversalParameters.algorithm4(1.0, 1e-6, ALPHA, 0.05, 10_000, ROWS, vc=2)
    assert params.first_queries == params.public_queries == 2433 and params.switches
    assert params.agnostic.epsilon == 0.5 and params.sspp_epsilon == 0.5
    assert params.agnostic.queries_max == 2433  # A_AgPrivCl is run for m' queries, not m
    eps, delta = params.guarantee()
    _, chain_eps, chain_delta = params.agnostic.privacy_chain()[-1]
    assert eps >= chain_eps + 0.5 and eps == pytest.approx(chain_eps + 0.5) and eps <= 1.0 and delta <= 1e-6
    # A_SSPP's sampled EM at eps/2 on the n rows adds (1 + e^(eps/2)) TV(n), in delta_sampler
    em = (1 + math.exp(0.5)) * total_variation(ROWS)
    assert params.sspp_delta() >= em and delta >= chain_delta + em
    cert = params.certificate()
    assert cert["delta_sampler"] >= params.agnostic.certificate()["delta_sampler"] + em
    assert (cert["proven_epsilon"], cert["proven_delta"]) == (eps, delta)
    assert math.fsum(cert[f"delta_{k}"] for k in ("composition", "stability", "sampler", "resampling")) <= delta
    few = UniversalParameters.algorithm4(1.0, 1e-6, ALPHA, 0.05, 1000, ROWS, vc=2)
    assert not few.switches and few.first_queries == 1000 and few.guarantee() == few.agnostic.privacy_chain()[-1][1:]
    assert UniversalParameters.from_dict(params.to_dict()) == params


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Agnostic 1-feature data (label noise GAMMA), its queries split in two files for two calls."""
    folder = tmp_path_factory.mktemp("universal")
    out = folder / "data"
    assert main(["generate", "--kind", "agnostic", "--noise", str(GAMMA), "--rows", str(ROWS), "--features", "1",
                 "--queries", str(QUERIES), "--seed", "5", "--out", str(out),
                 "--cluster", write_thread_cluster(folder)]) == 0
    queries = pq.read_table(out / "queries")
    for name, lo, hi in (("first", 0, 4000), ("second", 4000, QUERIES)):
        part = queries.slice(lo, hi - lo)
        write_parquet(str(out / name / "part.parquet"), {c: part.column(c) for c in part.column_names})
    return out


def _answer(data, tmp_path, cluster, queries: str, *extra: str) -> list[str]:
    return ["answer", "--mode", "universal", "--hypothesis", "threshold", "--private", str(data / "private"),
            "--queries", str(data / queries), "--state", str(tmp_path / "state"), "--log", str(tmp_path / "log"),
            "--epsilon", "1", "--alpha", str(ALPHA), "--subsamples", "50",
            "--batch-size", "1000", "--truth", str(data / "truth"), "--cluster", cluster, "--json", *extra]


def _run(args: list[str], capsys) -> dict:
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out.strip().splitlines()[-1])


def _log(tmp_path):
    return pq.read_table(tmp_path / "log").sort_by("batch")


def test_switch_to_the_released_model(data, tmp_path, capsys, thread_cluster_yaml) -> None:
    """After m_o queries the log's source switches, budget_used freezes, and h_priv's answers
    err at most alpha + gamma (the best threshold errs gamma on this data) against the labels."""
    first = _run(_answer(data, tmp_path, thread_cluster_yaml, "first"), capsys)
    m_o = first["universal"]["public_queries"]
    assert first["mode"] == "universal" and first["proven_epsilon"] <= 1.0 and first["proven_delta"] <= 1e-6
    assert first["released_model_answers"] == 4000 - m_o
    assert first["answered"] + first["abstained"] + first["refused"] == 4000
    second = _run(_answer(data, tmp_path, thread_cluster_yaml, "second"), capsys)
    assert second["budget_used"] == first["budget_used"]  # frozen: h_priv answers are post-processing
    assert second["released_model_answers"] == second["answered"] == QUERIES - 4000

    log = _log(tmp_path)
    source = log.column("source").to_numpy(zero_copy_only=False)
    assert (source[:m_o] == "sparse_vector").all() and (source[m_o:] == "released_model").all()
    assert (log.column("query_id").to_numpy() == np.arange(QUERIES)).all()
    sizes = [pq.read_metadata(p).num_rows for p in sorted((tmp_path / "log").glob("batch-*.parquet"))]
    assert sum(sizes) == QUERIES and max(sizes) <= 1000  # the batch holding query m_o is split in two
    hypothesis, features, record = load_model(str(tmp_path / "log" / RELEASED_MODEL_FILE))
    assert record["epsilon"] == 0.5 and record["public_points"] == m_o and features == ["x0"]
    later = source == "released_model"
    x = log.column("x0").to_numpy()[later].reshape(-1, 1)
    answers = log.column("answer").to_numpy()[later]
    assert (hypothesis.predict(x) == answers).all()  # the public model reproduces the public answers
    truth = pq.read_table(data / "truth").sort_by("query_id").column("label").to_numpy()
    error = np.mean(answers != truth[later])
    assert error <= GAMMA + ALPHA, error
    provenance = json.loads(pq.read_schema(sorted((tmp_path / "log").glob("batch-*.parquet"))[-1])
                            .metadata[b"pcqr.provenance"])
    assert provenance["mode"] == "universal" and provenance["released_model"]["file"] == RELEASED_MODEL_FILE
    assert b"relabeller" not in b"".join(p.read_bytes() for p in (tmp_path / "log").iterdir())


def _ledger_at(state: dict) -> None:
    """Put the session's ledger row (pcqr.pipeline.session.book) at a hand-made state's position."""
    import os
    import sqlite3
    from contextlib import closing

    position = {**{key: state[key] for key in ("next_batch", "last_hash", "pending_batch", "noise_state", "totals",
                                               "input")},
                **{key: state["sparse_vector"][key] for key in ("bottoms", "queries_seen")}}
    with closing(sqlite3.connect(os.environ["PCQR_LEDGER"])) as db, db:
        db.execute("UPDATE sessions SET bottoms = ?, batches = ?, last_hash = ?, position = ? WHERE session_id = ?",
                   (position["bottoms"], position["next_batch"], position["last_hash"], json.dumps(position),
                    state["session_id"]))


def test_switch_resumes_after_a_crash_before_the_model_was_saved(data, tmp_path, capsys, thread_cluster_yaml,
                                                                 monkeypatch) -> None:
    """A run that stopped after query m_o but before h_priv was saved switches at the start of the next,
    and releases the same h_priv: A_SSPP's selection is drawn from the session key, fixed at training,
    so killing the run before its save and retrying gains nothing (issue 27)."""
    from pcqr.pipeline.mechanisms import universal

    selections: list[list[int]] = []  # the first words each A_SSPP run draws
    real = universal.release_classifier

    def spy(client, params, hypothesis, private, public, noise):  # type: ignore[no-untyped-def]
        selections.append(noise.uniform_words(4).tolist())
        return real(client, params, hypothesis, private, public, noise)

    monkeypatch.setattr(universal, "release_classifier", spy)
    first = _run(_answer(data, tmp_path, thread_cluster_yaml, "first"), capsys)
    m_o = first["universal"]["public_queries"]
    state_file = tmp_path / "state" / "session.json"
    state = json.loads(state_file.read_text())
    # roll the state back to "the coordinator's last batch is logged, the switch has not run"
    batches = sorted((tmp_path / "log").glob("batch-*.parquet"))
    keep = [b for b in batches if (pq.read_table(b).column("source").to_numpy(zero_copy_only=False) == "sparse_vector").all()]
    for extra in batches[len(keep):]:
        extra.unlink()
    drawn = load_model(str(tmp_path / "log" / RELEASED_MODEL_FILE))[2]["hypothesis"]
    (tmp_path / "log" / RELEASED_MODEL_FILE).unlink()
    state.update(released=None, next_batch=len(keep), pending_batch=len(keep) - 1,
                 totals={**state["totals"], "answered": state["totals"]["answered"] - state["totals"]["released_model"],
                         "released_model": 0})
    import hashlib

    state["last_hash"] = hashlib.sha256(keep[-1].read_bytes()).hexdigest()
    state_file.write_text(json.dumps(state))
    _ledger_at(state)  # ... and the ledger, the authority, where that run left it
    second = _run(_answer(data, tmp_path, thread_cluster_yaml, "second"), capsys)
    assert second["budget_used"] == first["budget_used"] and second["released_model_answers"] == QUERIES - 4000
    assert load_model(str(tmp_path / "log" / RELEASED_MODEL_FILE))[2]["hypothesis"] == drawn
    assert len(selections) == 2 and selections[0] == selections[1]  # the same randomness, not a fresh draw
    source = _log(tmp_path).column("source").to_numpy(zero_copy_only=False)
    assert (source[:m_o] == "sparse_vector").all() and (source[m_o:] == "released_model").all()


def test_no_switch_when_m_is_below_m_o(data, tmp_path, capsys, thread_cluster_yaml) -> None:
    """m < m_o: A_UnvPrivCl is A_AgPrivCl for m queries (eps/2 spent), nothing is released, the rest refused."""
    summary = _run(_answer(data, tmp_path, thread_cluster_yaml, "first", "--queries-max", "1000"), capsys)
    assert summary["universal"]["switches"] is False and summary["universal"]["sspp_epsilon"] == 0.0
    assert summary["released_model_answers"] == 0 and summary["refused"] >= 3000
    assert not (tmp_path / "log" / RELEASED_MODEL_FILE).exists()
    assert set(_log(tmp_path).column("source").to_pylist()) == {"sparse_vector"}


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--hypothesis", "finite"], "--hypothesis finite needs a non-empty list"),
        (["--hypothesis", "nonsense"], "--hypothesis 'nonsense' is unknown"),
        (["--alpha", "1.5"], "--alpha must be in (0, 1)"),
        (["--epsilon", "0.0001"], "needs at least"),
    ],
)
def test_universal_bad_input(data, tmp_path, capsys, thread_cluster_yaml, extra, needle) -> None:
    code = main([*_answer(data, tmp_path, thread_cluster_yaml, "first"), *extra])
    _, err = capsys.readouterr()
    assert code != 0 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "log").exists() and not (tmp_path / "state").exists()


def _trained_before_the_switch(data, tmp_path, capsys, cluster):
    """A session on a private copy, trained and past 100 queries (m_o not reached): (copy, its table)."""
    private = tmp_path / "private"
    table = pq.read_table(data / "private")
    write_parquet(str(private / "part.parquet"), {c: table.column(c) for c in table.column_names})
    args = _answer(data, tmp_path, cluster, "first", "--queries-max", "10000")
    args[args.index("--private") + 1] = str(private)
    small = pq.read_table(data / "first").slice(0, 100)
    write_parquet(str(tmp_path / "few" / "part.parquet"), {c: small.column(c) for c in small.column_names})
    args[args.index("--queries") + 1] = str(tmp_path / "few")
    first = _run(args, capsys)
    assert "released_model" not in first  # m_o not reached: A_SSPP has not run
    return private, table


def _refused_before_the_switch(tmp_path, data, capsys, cluster, needle: str) -> None:
    before = (tmp_path / "state" / "session.json").read_text()
    code = main(["answer", "--state", str(tmp_path / "state"), "--queries", str(data / "second"),
                 "--cluster", cluster])
    _, err = capsys.readouterr()
    lines = [line for line in err.strip().splitlines() if not line.startswith("dashboard:")]
    assert code != 0 and len(lines) == 1 and needle in lines[0], err
    assert (tmp_path / "state" / "session.json").read_text() == before
    assert not (tmp_path / "log" / RELEASED_MODEL_FILE).exists()


def test_a_changed_private_dataset_is_refused_before_the_switch(data, tmp_path, capsys, thread_cluster_yaml) -> None:
    """The session is trained; the private data later loses rows: A_SSPP would run on other data."""
    private, table = _trained_before_the_switch(data, tmp_path, capsys, thread_cluster_yaml)
    write_parquet(str(private / "part.parquet"), {c: table.column(c).slice(0, ROWS - 1) for c in table.column_names})
    _refused_before_the_switch(tmp_path, data, capsys, thread_cluster_yaml, "the session was trained on 400000")


def test_changed_contents_with_the_same_row_count_are_refused(data, tmp_path, capsys, thread_cluster_yaml) -> None:
    """Same rows, one label flipped: the content fingerprint (the ledger's SHA-256 hashes) differs."""
    private, table = _trained_before_the_switch(data, tmp_path, capsys, thread_cluster_yaml)
    state = json.loads((tmp_path / "state" / "session.json").read_text())
    assert state["private_fingerprint"].startswith("rows:")  # private state only, never in the log
    assert state["private_fingerprint"].encode() not in b"".join(p.read_bytes() for p in (tmp_path / "log").iterdir())
    labels = table.column("label").to_numpy().copy()
    labels[0] ^= 1
    columns = {c: table.column(c) for c in table.column_names}
    write_parquet(str(private / "part.parquet"), {**columns, "label": labels})
    _refused_before_the_switch(tmp_path, data, capsys, thread_cluster_yaml, "its contents changed since the session")


def test_more_sampled_rows_than_rows_is_refused() -> None:
    """Universal mode runs A_AgPrivCl at eps / 2: eps / 2 > 56 can make n' > n; one line naming --epsilon."""
    with pytest.raises(PcqrError, match="--epsilon too large"):
        UniversalParameters.algorithm4(120.0, 1e-6, ALPHA, 0.05, 10_000, 1000, vc=1)
