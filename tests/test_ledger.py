"""The privacy-budget ledger: basic composition, refusal with nothing recorded, the dataset identity
and its cache, `pcqr budget set/show`, and concurrent charges from separate processes."""
from __future__ import annotations

import datetime
import json
import os
import shlex
import shutil
import sqlite3

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

import pcqr.pipeline.budget.fingerprint as fingerprint_module
from pcqr.jobs.budget import command
from pcqr.pipeline.data.datasets import open_dataset
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.budget.fingerprint import dataset_identity
from pcqr.pipeline.budget.charging import charge_private_use
from pcqr.pipeline.budget.ledger import Ledger, charge_note
from pcqr.pipeline.budget.location import budget_command, ledger_location
from tests.conftest import threshold_data, write_parquet


def private_dataset(directory: str, rows: int = 1000) -> str:
    """Two Parquet files of private rows; returns the directory (the dataset's URI)."""
    write_parquet(os.path.join(directory, "part-0.parquet"), threshold_data(rows, seed=1))
    write_parquet(os.path.join(directory, "part-1.parquet"), threshold_data(rows // 2, seed=2))
    return directory


def flip_byte(path: str, position: int = 100) -> None:
    """Change one byte of a file in place (same size)."""
    with open(path, "r+b") as handle:
        handle.seek(position)
        byte = handle.read(1)
        handle.seek(position)
        handle.write(bytes([byte[0] ^ 0xFF]))


def invoke(*args: str) -> Result:
    return CliRunner().invoke(command, list(args))


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


# --- where the ledger lives ------------------------------------------------------------------

def test_ledger_path_is_the_option_then_the_environment_then_the_default(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PCQR_LEDGER", raising=False)
    default = tmp_path / "home" / ".local" / "share" / "pcqr" / "ledger.sqlite"
    assert ledger_location(None) == str(default) and default.parent.is_dir()
    monkeypatch.setenv("PCQR_LEDGER", str(tmp_path / "env" / "l.sqlite"))
    assert ledger_location(None) == str(tmp_path / "env" / "l.sqlite") and (tmp_path / "env").is_dir()
    assert ledger_location(str(tmp_path / "opt" / "x.sqlite")) == str(tmp_path / "opt" / "x.sqlite")
    # the command uses the environment's ledger when --ledger is absent
    uri = private_dataset(str(tmp_path / "private"))
    assert invoke("set", uri, "--epsilon", "1", "--delta", "0").exit_code == 0
    with Ledger(str(tmp_path / "env" / "l.sqlite")) as ledger:
        assert ledger.store.budget(dataset_identity(open_dataset(uri, "private").files)) == (1.0, 0.0)


@pytest.mark.parametrize("empty", ["", " "])
def test_an_empty_setting_is_refused_not_the_home_ledger(tmp_path, monkeypatch, empty: str) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PCQR_LEDGER", empty)
    with pytest.raises(PcqrError, match="^PCQR_LEDGER is set but empty: set it to the ledger file's path or a postgresql:// URL, or unset"):
        ledger_location(None)
    assert ledger_location(str(tmp_path / "l.sqlite")) == str(tmp_path / "l.sqlite")  # --ledger wins, as always
    monkeypatch.delenv("PCQR_LEDGER")
    with pytest.raises(PcqrError, match="^--ledger is empty"):
        ledger_location(empty)
    assert not (tmp_path / "home").exists()


def _pasted(text: str, start: str) -> list[str]:
    """The words of the command line that starts at ``start`` in ``text`` (up to a ')' or the end),
    as a shell would split it."""
    command = text[text.index(start):]
    words = shlex.split(command[:command.rindex(")")] if ")" in command else command)
    return words


def test_budget_hints_paste_back_with_a_space_and_a_quote(tmp_path, monkeypatch) -> None:
    """The ledger's hints are command lines: every path shell-quoted, --ledger named when it is not the
    one pcqr finds by itself; pasted back (E and D filled in), they run."""
    odd = tmp_path / "it's a folder"
    uri = private_dataset(str(odd / "private data"))
    ledger = str(odd / "my ledger.sqlite")
    files = open_dataset(uri, "private").files
    note = charge_note(charge_private_use(files, uri, "train", 1.0, 0.0, {}, ledger))
    words = _pasted(note, "pcqr budget set")
    assert words == ["pcqr", "budget", "set", uri, "--epsilon", "E", "--delta", "D", "--ledger", ledger]
    words[words.index("E")], words[words.index("D")] = "2", "0"
    assert invoke(*words[2:]).exit_code == 0
    with Ledger(ledger) as book, pytest.raises(PcqrError) as refused:
        book.charge(dataset_identity(files), uri, "learn", 5.0, 0.0, {})
    assert _pasted(str(refused.value), "pcqr budget show") == ["pcqr", "budget", "show", uri, "--ledger", ledger]
    result = invoke(*_pasted(str(refused.value), "pcqr budget show")[2:])
    assert result.exit_code == 0 and "(2, 0)" in result.stdout
    monkeypatch.setenv("PCQR_LEDGER", ledger)  # the ledger pcqr finds by itself: no --ledger
    assert budget_command("show", uri, ledger) == f"pcqr budget show {shlex.quote(uri)}"


def test_a_file_that_is_not_a_ledger_is_refused_in_one_line(tmp_path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(PcqrError, match="not a usable SQLite database"):
        Ledger(str(bad))
    newer = str(tmp_path / "newer.sqlite")
    Ledger(newer).close()
    with sqlite3.connect(newer) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(PcqrError, match="schema version 99 is newer"):
        Ledger(newer)


# --- basic composition -----------------------------------------------------------------------

def test_basic_composition_adds_eps_and_deltas_and_refuses_with_nothing_recorded(tmp_path) -> None:
    with Ledger(str(tmp_path / "l.sqlite")) as ledger:
        ledger.set_budget("sha256:x", "data/x", 3.0, 3e-6)
        for i in range(3):  # 3 x 1e-6 rounds to 3.0000000000000004e-06: the tolerance admits it
            charged = ledger.charge("sha256:x", "data/x", "train", 1.0, 1e-6, {"i": i})
        assert charged["limited"] and charged["spent_epsilon"] == 3.0
        assert ledger.store.spent("sha256:x") == pytest.approx((3.0, 3e-6), rel=1e-12)
        message = (r"privacy budget of data/x exceeded: spent \(3, 3e-06\) \+ this job \(0.001, 0\) > "
                   r"budget \(3, 3e-06\); see pcqr budget show data/x")
        with pytest.raises(PcqrError, match=message):
            ledger.charge("sha256:x", "data/x", "learn", 1e-3, 0.0, {})
        assert [c["parameters"] for c in ledger.store.charges("sha256:x")] == [{"i": 0}, {"i": 1}, {"i": 2}]
        # delta alone can exhaust a budget; eps alone too
        ledger.set_budget("sha256:y", "data/y", 10.0, 1e-6)
        ledger.charge("sha256:y", "data/y", "release", 1.0, 6e-7, {})
        with pytest.raises(PcqrError, match="exceeded"):
            ledger.charge("sha256:y", "data/y", "release", 1.0, 5e-7, {})
        ledger.charge("sha256:y", "data/y", "release", 8.0, 4e-7, {})
        with pytest.raises(PcqrError, match="exceeded"):
            ledger.charge("sha256:y", "data/y", "learn", 1.5, 0.0, {})
        assert ledger.store.spent("sha256:y") == pytest.approx((9.0, 1e-6), rel=1e-12)
        assert len(ledger.store.charges("sha256:y")) == 2
        with pytest.raises(PcqrError, match=r"epsilon must be in \[0, 700\]"):
            ledger.charge("sha256:y", "data/y", "learn", -1.0, 0.0, {})


def test_without_a_budget_charges_are_recorded_unlimited_and_a_budget_cannot_undercut_them(tmp_path) -> None:
    with Ledger(str(tmp_path / "l.sqlite")) as ledger:
        charged = ledger.charge("sha256:z", "data/z", "train", 2.0, 1e-6, {})
        assert charged["limited"] is False and charged["budget_epsilon"] is None
        assert ledger.store.budget("sha256:z") is None and ledger.store.spent("sha256:z") == (2.0, 1e-6)
        with pytest.raises(PcqrError, match=r"below what data/z has already spent \(2, 1e-06\)"):
            ledger.set_budget("sha256:z", "data/z", 1.0, 1e-5)
        assert ledger.store.budget("sha256:z") is None
        ledger.set_budget("sha256:z", "data/z", 2.0, 1e-6, name="zed")
        assert ledger.store.find_name("zed") == "sha256:z"
        with pytest.raises(PcqrError, match="--name zed: already names another dataset"):
            ledger.set_budget("sha256:w", "data/w", 1.0, 0.0, name="zed")
        with pytest.raises(PcqrError, match="exceeded"):
            ledger.charge("sha256:z", "data/z", "train", 0.1, 0.0, {})


# --- identity ----------------------------------------------------------------------------------

def test_identity_is_of_the_rows_not_the_files_and_changes_with_one_value(tmp_path) -> None:
    files = open_dataset(private_dataset(str(tmp_path / "a")), "private").files
    identity = dataset_identity(files)
    assert identity.startswith("rows:") and len(identity) == len("rows:") + 64
    assert dataset_identity(list(reversed(files))) == identity
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # a copy elsewhere: same contents, same identity
    copy = [str(tmp_path / "b" / os.path.basename(f)) for f in files]
    assert dataset_identity(copy) == identity
    os.rename(copy[1], str(tmp_path / "b" / "part-9.parquet"))  # names are not part of the identity
    copy[1] = str(tmp_path / "b" / "part-9.parquet")
    assert dataset_identity(copy) == identity
    table = pq.read_table(copy[1])
    values = table.column("x1").to_numpy().copy()
    values[7] += 1e-9
    pq.write_table(table.set_column(table.schema.get_field_index("x1"), "x1", pa.array(values)), copy[1])
    assert dataset_identity(copy) != identity  # one value changed


def test_unchanged_files_are_not_read_again(tmp_path, monkeypatch) -> None:
    files = open_dataset(private_dataset(str(tmp_path / "private")), "private").files
    hashed: list[str] = []
    real = fingerprint_module.fingerprint_part
    monkeypatch.setattr(fingerprint_module, "fingerprint_part", lambda *a: hashed.append("x") or real(*a))
    monkeypatch.setattr(fingerprint_module, "_MEMO", {})
    path = str(tmp_path / "l.sqlite")
    with Ledger(path) as ledger:
        identity = dataset_identity(files, ledger=ledger)
        assert len(hashed) == 2
        fingerprint_module._MEMO.clear()
        assert dataset_identity(files, ledger=ledger) == identity and len(hashed) == 2
    with Ledger(path) as ledger:  # the cache is in the database, not in memory
        fingerprint_module._MEMO.clear()
        assert dataset_identity(files, ledger=ledger) == identity and len(hashed) == 2
        stat = os.stat(files[0])
        os.utime(files[0], ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched: read again
        assert dataset_identity(files, ledger=ledger) == identity and len(hashed) == 4


def test_identity_computed_by_worker_tasks_equals_the_local_one(tmp_path, client) -> None:
    from distributed import get_task_stream

    files = open_dataset(private_dataset(str(tmp_path / "private")), "private").files
    with get_task_stream(client) as tasks:
        on_workers = dataset_identity(files, client)
    assert on_workers == dataset_identity(files)
    assert sum("fingerprint_part" in str(t["key"]) for t in tasks.data) == len(files)  # one task per part


# --- the jobs' entry point ---------------------------------------------------------------------

def test_a_refused_job_reads_no_private_row_and_records_nothing(tmp_path, monkeypatch) -> None:
    uri = private_dataset(str(tmp_path / "private"))
    path = str(tmp_path / "l.sqlite")
    files = open_dataset(uri, "private").files
    lines: list[str] = []
    charge_private_use(files, uri, "train", 1.0, 1e-6, {"cutoff": 50}, path, echo=lines.append)
    assert lines == [f"ledger: charged (1, 1e-06) to {uri}: spent (1, 1e-06); no budget set for {uri} "
                     f"(pcqr budget set {uri} --epsilon E --delta D --ledger {path})"]  # not the default ledger
    assert invoke("set", uri, "--epsilon", "1.5", "--delta", "1e-6", "--ledger", path).exit_code == 0
    reads: list[str] = []

    def forbidden(name: str):
        def read(*args: object, **kwargs: object) -> None:
            reads.append(name)
            raise AssertionError(f"a private row was read ({name})")
        return read

    for name in ("read", "read_row_group", "read_row_groups", "iter_batches"):
        monkeypatch.setattr(pq.ParquetFile, name, forbidden(name))
    monkeypatch.setattr(pq, "read_table", forbidden("read_table"))
    monkeypatch.setattr("pcqr.pipeline.data.datasets.read_part", forbidden("read_part"))
    dataset = open_dataset(uri, "private")  # what a job does first: metadata only
    with pytest.raises(PcqrError, match=f"privacy budget of {uri} exceeded"):
        charge_private_use(dataset.files, uri, "train", 1.0, 0.0, {}, path)
    assert reads == []
    with Ledger(path) as ledger:
        assert len(ledger.store.charges(dataset_identity(files, ledger=ledger))) == 1
    lines.clear()
    charged = charge_private_use(dataset.files, uri, "learn", 0.5, 0.0, {}, path, echo=lines.append)
    assert charged["limited"] and lines == [f"ledger: charged (0.5, 0) to {uri}: spent (1.5, 1e-06) of (1.5, 1e-06)"]


def test_changed_contents_are_a_new_identity_and_the_charge_says_so(tmp_path) -> None:
    uri = private_dataset(str(tmp_path / "private"))
    path = str(tmp_path / "l.sqlite")
    assert invoke("set", uri, "--epsilon", "1", "--delta", "1e-6", "--ledger", path).exit_code == 0
    for i, seed in enumerate((3, 4)):  # other rows altogether (rows appended: tests/test_fingerprint.py)
        write_parquet(os.path.join(uri, f"part-{i}.parquet"), threshold_data(500, seed=seed))
    lines: list[str] = []
    charged = charge_private_use(open_dataset(uri, "private").files, uri, "train", 5.0, 0.0, {}, path,
                                 echo=lines.append)
    assert charged["limited"] is False and len(charged["earlier_identities"]) == 1
    assert len(lines) == 2 and "other contents on record" in lines[1]


# --- pcqr budget set / show ------------------------------------------------------------------

def test_budget_set_then_show_lists_every_charge(tmp_path) -> None:
    uri = private_dataset(str(tmp_path / "private"))
    path = str(tmp_path / "l.sqlite")
    result = invoke("set", uri, "--epsilon", "3", "--delta", "3e-6", "--name", "census", "--ledger", path, "--json")
    assert result.exit_code == 0, result.output
    files = open_dataset(uri, "private").files
    assert last_json(result.stdout)["identity"] == dataset_identity(files)
    charge_private_use(files, uri, "train", 1.0, 1e-6, {"cutoff": 50}, path)
    charge_private_use(files, uri, "learn", 0.5, 0.0, {"hypothesis": "threshold"}, path)
    for name in ("census", uri):  # by its registered name or by its path
        result = invoke("show", name, "--ledger", path, "--json")
        assert result.exit_code == 0, result.output
        shown = last_json(result.stdout)
        assert shown["dataset"] == uri and shown["name"] == "census"
        assert shown["budget"] == {"epsilon": 3.0, "delta": 3e-6}
        assert shown["spent"] == {"epsilon": 1.5, "delta": 1e-6}
        assert [(c["job"], c["epsilon"], c["delta"], c["parameters"]) for c in shown["charges"]] == [
            ("train", 1.0, 1e-6, {"cutoff": 50}), ("learn", 0.5, 0.0, {"hypothesis": "threshold"})]
        for c in shown["charges"]:
            assert datetime.datetime.fromisoformat(c["time"]).utcoffset() == datetime.timedelta(0)
    text = invoke("show", uri, "--ledger", path).stdout
    assert "(3, 3e-06)" in text and "(1.5, 1e-06)" in text and "(1.5, 2e-06)" in text
    assert '{"cutoff": 50}' in text and '{"hypothesis": "threshold"}' in text
    # raising the budget is allowed; lowering it below what is spent is not
    assert invoke("set", "census", "--epsilon", "4", "--delta", "3e-6", "--ledger", path).exit_code == 0
    refused = invoke("set", "census", "--epsilon", "1", "--delta", "3e-6", "--ledger", path)
    assert isinstance(refused.exception, PcqrError) and "already spent (1.5, 1e-06)" in str(refused.exception)
    with Ledger(path) as ledger:
        assert ledger.store.budget(dataset_identity(files)) == (4.0, 3e-6)


@pytest.mark.parametrize("args, needle", [
    (["--epsilon", "0", "--delta", "1e-6"], "--epsilon must be a positive number"),
    (["--epsilon", "nan", "--delta", "1e-6"], "--epsilon must be a positive number"),
    (["--epsilon", "1", "--delta", "1"], "--delta must be in [0, 1)"),
    (["--epsilon", "1", "--delta", "-1e-9"], "--delta must be in [0, 1)"),
    (["--epsilon", "1", "--delta", "0", "--name", " "], "--name must not be empty"),
])
def test_budget_set_refuses_bad_options_in_one_line(tmp_path, args: list[str], needle: str) -> None:
    uri = private_dataset(str(tmp_path / "private"))
    result = invoke("set", uri, *args, "--ledger", str(tmp_path / "l.sqlite"))
    assert isinstance(result.exception, PcqrError) and needle in str(result.exception)
    assert "\n" not in str(result.exception)


def test_budget_show_of_a_missing_dataset_names_it(tmp_path) -> None:
    result = invoke("show", str(tmp_path / "nowhere"), "--ledger", str(tmp_path / "l.sqlite"))
    assert isinstance(result.exception, PcqrError) and "nowhere" in str(result.exception)


# Ten processes charging at once: tests/test_ledger_contract.py, against both stores.


def test_a_ledger_written_before_sessions_existed_gains_the_table(tmp_path) -> None:
    """The sessions table (pcqr.pipeline.session.book) is one more CREATE TABLE IF NOT EXISTS: an older
    ledger keeps its charges and gains it, with no schema version change."""
    path = str(tmp_path / "ledger.sqlite")
    with Ledger(path) as ledger:
        ledger.charge("sha256:x", "data", "train", 1.0, 1e-6, {})
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE sessions")
    with Ledger(path) as ledger:
        assert len(ledger.store.charges("sha256:x")) == 1
    with sqlite3.connect(path) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "sessions" in tables
        assert db.execute("SELECT COUNT(*) FROM sessions").fetchone() == (0,)
