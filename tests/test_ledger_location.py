"""One reading of a ledger setting, and no password anywhere (issue 46, items 4 and 6;
pcqr.pipeline.budget.location).

A setting that is neither a server URL nor a file (another ``scheme://``, a libpq keyword/value
string) is refused in one line naming where it came from, and creates nothing; messages show a
server as its user, host, port and database; hints paste back without a password; a URL that libpq
and Python read differently is refused before either reads it; and a whole train, answer and
``budget show`` against a real server leaves its password in no output, file or ledger row.
"""
from __future__ import annotations

import json
import os
import shlex
from contextlib import closing
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from pcqr.jobs.cli import main
from pcqr.pipeline.budget.location import budget_command, check_server_url, ledger_location, shown
from pcqr.pipeline.errors import PcqrError
from tests.conftest import MECHANICS_PRIVACY, write_session_data

#: Two halves of a password, each distinctive: neither may show anywhere.
PIECES = ("Pw1x", "Pw2y")


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == "" and len(lines) == 1 and lines[0].startswith("pcqr: error: "), captured
    return lines[0]


def _secret_free(text: str) -> bool:
    return not any(piece in text for piece in PIECES) and "***" not in text


# --- a setting that names neither a server nor a file ----------------------------------------

NOT_A_LEDGER = [
    "postgresq://alice:Pw1x@127.0.0.1:5432/db",  # a typo of the scheme
    "postgresql+psycopg://alice:Pw1x@127.0.0.1:5432/db",  # SQLAlchemy's spelling
    "mysql://alice:Pw1x@host/db",
    "host=127.0.0.1 port=5432 user=alice password=Pw1x dbname=x",  # libpq's keyword/value string
    "  dbname = x password=Pw1x",
]


def _origin(how: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], str]:
    """``budget verify``'s arguments with ``value`` given ``how``, and how the refusal must name it."""
    monkeypatch.delenv("PCQR_LEDGER", raising=False)
    if how == "--ledger":
        return ["--ledger", value], "--ledger"
    if how == "PCQR_LEDGER":
        monkeypatch.setenv("PCQR_LEDGER", value)
        return [], "PCQR_LEDGER"
    if how == "DASK_PCQR__LEDGER":
        monkeypatch.setenv("DASK_PCQR__LEDGER", value)
        return [], "DASK_PCQR__LEDGER"
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"pcqr": {"ledger": value}}))
    return ["--cluster", str(cluster)], f"{cluster}: pcqr.ledger"


@pytest.mark.parametrize("how", ["--ledger", "PCQR_LEDGER", "cluster.yaml", "DASK_PCQR__LEDGER"])
@pytest.mark.parametrize("value", NOT_A_LEDGER)
def test_another_scheme_or_a_keyword_string_is_refused_and_creates_nothing(
        value: str, how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Each used to become a SQLite ledger in the current folder (named after the password), exit 0."""
    folder = tmp_path / "here"
    folder.mkdir()
    monkeypatch.chdir(folder)
    options, origin = _origin(how, value, tmp_path, monkeypatch)
    line = _one_line_error(capsys, ["budget", "verify", *options])
    assert f"error: {origin}: " in line and "names no ledger" in line and _secret_free(line), line
    assert list(folder.iterdir()) == []


def test_a_mistyped_scheme_is_refused_before_train_reads_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    write_session_data(tmp_path, rows=2000, queries=10)
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    line = _one_line_error(capsys, ["train", "--private", str(tmp_path / "private"), "--state", str(tmp_path / "st"),
                                    "--ledger", NOT_A_LEDGER[0]])
    assert "--ledger: postgresq:// names no ledger" in line and _secret_free(line)
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("value", NOT_A_LEDGER)
def test_the_python_api_refuses_the_same_settings(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PcqrError) as refused:
        ledger_location(value)
    assert str(refused.value).startswith("--ledger: ") and _secret_free(str(refused.value))
    monkeypatch.setenv("PCQR_LEDGER", value)
    with pytest.raises(PcqrError, match="^PCQR_LEDGER: "):
        ledger_location(None)


@pytest.mark.parametrize("path", ["ledger.sqlite", "data/host.sqlite", "my host=1.sqlite", "mysql:x.sqlite"])
def test_a_file_s_path_is_still_a_file(path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert ledger_location(path) == str(tmp_path / path)


# --- how a server URL is shown, and which URLs are refused ----------------------------------

@pytest.mark.parametrize("url, expected", [
    ("postgresql://alice:Pw1x@db.example:5432/pcqr", "postgresql://alice@db.example:5432/pcqr"),
    ("POSTGRESQL://alice:Pw1x@host/db", "postgresql://alice@host/db"),
    ("postgres://alice:Pw1x%40Pw2y@host/db", "postgres://alice@host/db"),  # a percent-encoded @
    ("postgresql://alice@host:5432/db?password=Pw1x&sslmode=require", "postgresql://alice@host:5432/db"),
    ("postgresql://host/db?user=alice&p%61ssword=Pw1x&dbname=other", "postgresql://host/db?user=alice&dbname=other"),
    ("postgresql://admin@/postgres?host=/some/socket/dir&port=5432",
     "postgresql://admin@/postgres?host=/some/socket/dir&port=5432"),
    ("postgresql://:Pw1x@h1:5432,h2:5433/db", "postgresql://h1:5432,h2:5433/db"),
    ("ledger.sqlite", "ledger.sqlite"),
])
def test_shown_is_the_user_host_port_and_database_only(url: str, expected: str) -> None:
    assert shown(url) == expected


#: URLs whose user info libpq (first @ before any /) and Python (last @ before / ? #) read apart, or
#: that libpq would refuse in an error quoting the password.
UNREADABLE = {
    "postgresql://alice:Pw1x@Pw2y@127.0.0.1:1/db": "%40",
    "postgresql://alice:Pw1x/Pw2y@127.0.0.1:1/db": "%2F",
    "postgresql://alice:Pw1x?Pw2y@127.0.0.1:1/db": "%3F",
    "postgresql://alice:Pw1x#Pw2y@127.0.0.1:1/db": "%23",
    "postgresql://127.0.0.1:1?password=Pw1x@Pw2y": "%40",
    "postgresql://alice:Pw1x%zzPw2y@127.0.0.1:1/db": "%25",
    "postgresql://alice:Pw1x%00Pw2y@127.0.0.1:1/db": "%25",
    "postgresql://alice@127.0.0.1:1/db?password=Pw1x=Pw2y": "%3D",
    "postgresql://alice:Pw1x Pw2y@127.0.0.1:1/db": "%20",
    "postgresql://alice:Pw1x/1/Pw2y@127.0.0.1/db": "%2F",
    "postgresql://alice:Pw1x@[::1/db": "IPv6",
    "postgresql://alice:Pw1x/cr?a=Pw2y@host/db": "port",
}


@pytest.mark.parametrize("url", UNREADABLE)
def test_a_url_read_differently_by_libpq_and_python_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(PcqrError) as refused:
        check_server_url(url, "--ledger")
    message = str(refused.value)
    assert message.startswith("--ledger postgresql://...: not a valid postgresql:// URL: ")
    assert UNREADABLE[url] in message and "\n" not in message and _secret_free(message), message
    assert _secret_free(shown(url)) and _secret_free(budget_command("show", "data", url))


@pytest.mark.parametrize("url", [
    "postgresql://alice:Pw1x@127.0.0.1:1/db",
    "POSTGRESQL://alice:Pw1x@127.0.0.1:1/db",  # libpq reads an upper-case scheme as a keyword string
    "postgresql://alice@127.0.0.1:1/db?password=Pw1x",
    "postgresql://alice@127.0.0.1:1/db?sslmode=disable&p%61ssword=Pw1x",
    " postgres://alice:Pw1x@127.0.0.1:1/db ",
    *UNREADABLE,
])
def test_no_error_about_a_server_prints_its_password(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Port 1 refuses connections: what reaches libpq fails there, the rest is refused before."""
    line = _one_line_error(capsys, ["budget", "verify", "--ledger", url])
    assert _secret_free(line) and ("cannot connect" in line or "not a valid postgresql:// URL" in line), line


@pytest.mark.parametrize("url", ["POSTGRESQL://alice:Pw1x@host/db", "  postgresql://alice:Pw1x@host/db "])
def test_libpq_gets_the_scheme_in_lower_case(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PCQR_LEDGER", url)
    assert ledger_location(None) == ledger_location(url) == "postgresql://alice:Pw1x@host/db"


# --- hints: pasted back, they work --------------------------------------------------------------

@pytest.mark.parametrize("ledger, pasted", [
    ("postgresql://alice:Pw1x@host:5432/db", "postgresql://alice@host:5432/db"),
    ("postgresql://alice@host:5432/db?password=Pw1x&sslmode=require", "postgresql://alice@host:5432/db?sslmode=require"),
    ("postgresql://alice@host:5432/db?sslmode=require", "postgresql://alice@host:5432/db?sslmode=require"),
    ("postgres://alice@/db?host=/run/postgresql", "postgres://alice@/db?host=/run/postgresql"),
])
def test_a_hint_names_the_server_without_its_password(ledger: str, pasted: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PCQR_LEDGER", str(tmp_path / "mine.sqlite"))
    hint = budget_command("show", "data set", ledger)
    assert shlex.split(hint) == ["pcqr", "budget", "show", "data set", "--ledger", pasted] and _secret_free(hint)
    monkeypatch.setenv("PCQR_LEDGER", ledger)  # the ledger the command finds by itself: no --ledger
    assert budget_command("show", "data", ledger) == "pcqr budget show data"
    monkeypatch.setenv("PCQR_LEDGER", "mysql://x")  # refused by the command: --ledger, and no error here
    assert shlex.split(budget_command("show", "data", ledger))[-1] == pasted


# --- end to end: train, answer and budget show against a real server ----------------------------

def _texts(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` as text (bytes decoded leniently), and each Parquet file's values
    and metadata (which compression could hide from the bytes)."""
    found = {}
    for path in (p for p in folder.rglob("*") if p.is_file()):
        found[str(path)] = path.read_bytes().decode("utf-8", "replace")
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            found[f"{path} (values)"] = json.dumps(table.to_pylist(), default=str) + str(table.schema.metadata)
    return found


def _ledger_rows(superuser_url: str) -> dict[str, str]:
    """Every row of every table of the ledger's schema, as JSON text, read as the superuser."""
    import psycopg

    with closing(psycopg.connect(superuser_url, autocommit=True)) as conn:
        tables = [t for (t,) in conn.execute("SELECT table_name FROM information_schema.tables "
                                             "WHERE table_schema = 'pcqr' ORDER BY table_name")]
        assert {"charges", "sessions", "sketches", "budgets"} <= set(tables)
        return {table: "\n".join(r for (r,) in conn.execute(f"SELECT row_to_json(t)::text FROM pcqr.{table} t"))
                for table in tables}


def test_no_password_reaches_an_output_a_file_or_the_ledger(team_ledger: Any, tmp_path: Path, thread_cluster_yaml: str,
                                                           capsys: pytest.CaptureFixture[str],
                                                           caplog: pytest.LogCaptureFixture,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from pcqr.pipeline.budget.team_ledger import init_ledger

    password = "S3cret-pw-Qz7"
    role = f"leaky_{os.getpid()}_{team_ledger.database}"
    team_ledger.server.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
    init_ledger(team_ledger.admin_url, role)
    where = f"127.0.0.1:{team_ledger.server.port}/{team_ledger.database}"
    in_user_info, in_query = f"postgresql://{role}:{password}@{where}", f"postgresql://{role}@{where}?password={password}"
    write_session_data(tmp_path, rows=5000, queries=500)
    private, cluster = str(tmp_path / "private"), ["--cluster", thread_cluster_yaml]
    outputs = []

    def run(*argv: str, code: int = 0) -> None:
        assert main(list(argv)) == code, capsys.readouterr()
        captured = capsys.readouterr()
        outputs.append(captured.out + captured.err)

    run("train", "--private", private, "--state", str(tmp_path / "state"), *MECHANICS_PRIVACY, *cluster,
        "--ledger", in_user_info)
    run("answer", "--state", str(tmp_path / "state"), "--queries", str(tmp_path / "queries"), "--log",
        str(tmp_path / "log"), "--batch-size", "200", "--json", *cluster, "--ledger", in_query)
    assert main(["budget", "set", private, "--epsilon", "150", "--delta", "0.002", *cluster,
                 "--ledger", team_ledger.admin_url]) == 0  # the owner's: one more session would pass it
    capsys.readouterr()
    for url in (in_user_info, in_query):
        run("budget", "show", private, *cluster, "--ledger", url)
        run("budget", "show", private, "--json", *cluster, "--ledger", url)
        run("train", "--private", private, "--state", str(tmp_path / "refused"), *MECHANICS_PRIVACY, *cluster,
            "--ledger", url, code=2)
        run("budget", "verify", "--ledger", url)
    texts = {"stdout and stderr": "\n".join(outputs), "logging": caplog.text, **_texts(tmp_path),
             **_ledger_rows(team_ledger.superuser_url)}
    assert len(texts) > 10 and any(str(tmp_path / "state") in text for text in texts.values())  # the search sees
    leaked = [name for name, text in texts.items() if password in text]
    assert leaked == [], leaked
    # Messages show the server and role; hints paste back without the password ...
    assert json.loads(outputs[3].strip().splitlines()[-1])["ledger"] == f"postgresql://{role}@{where}"
    for refused in (outputs[4], outputs[8]):
        hint = refused.strip().split("; see ", 1)[1]
        assert shlex.split(hint) == ["pcqr", "budget", "show", private, "--ledger", f"postgresql://{role}@{where}"]
    monkeypatch.setenv("PGPASSWORD", password)  # ... and work with the password where it belongs
    run(*shlex.split(hint)[1:], *cluster)
    assert f"postgresql://{role}@{where}" in outputs[-1] and password not in outputs[-1]
