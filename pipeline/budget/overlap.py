"""Overlap with registered private datasets, from bottom-k sketches (:mod:`pcqr.pipeline.budget.fingerprint`).

Two uses, both reading only sketches in the ledger and (for the guard) the public file:

1. **Charges** (:func:`related_identities`). A dataset's row sketch is stored in the ledger when it
   is registered (its first charge, or ``pcqr budget set``). A job on a dataset whose rows largely
   overlap a registered one is charged to that identity as well as its own, in the same ledger
   transaction, and says so in one line: the overlapping rows are the same people, so every job
   that reads them counts against their budget. (Refusing instead would stop the ordinary case --
   rows appended to, or removed from, a budgeted dataset -- for no privacy gain; charging both can
   only overcount.) Datasets are related when either containment is estimated at
   >= ``OVERLAP_FRACTION`` (0.5; estimator and error in :mod:`pcqr.pipeline.budget.sketch`: at k = 4096 within
   +-0.05 except with probability 2.5e-9, never overlap that is not there): rows appended to or
   removed from a budgeted dataset (up to about half of it) stay charged to it. Rows are compared whole (every
   column, by value): a dataset re-written with a column added or dropped is NOT recognised, and
   datasets of common rows (few distinct values) relate whenever they share those values (that
   errs on the safe side). Ledgers written before identities were of decoded rows keep budgets
   under ``sha256:`` identities; a dataset whose old identity is on record is linked to it.

2. **Misuse guard** (:func:`check_public_overlap`). ``--public`` (learn, release), ``--queries`` and
   ``--truth`` (answer) are compared, by the feature columns they share with it, with every
   registered feature sketch and with the job's own private dataset's. A public row whose feature
   vector occurs exactly once (``RARE``) among a private dataset's rows singles out a private row;
   if any public row in the sketch's range (hash <= tau, tau the sketch's k-th value) does, the
   command is refused in one line naming the option and the private dataset, before anything is
   charged; ``--allow-private-overlap`` lets it through (recorded in the output's provenance).
   What it detects: a public file holding x distinct private once-occurring feature vectors, out
   of n_d distinct in the private data, is refused with probability at least 1 - exp(-x k / n_d)
   (certain when n_d <= k, the sketch then being exact): at n_d = 3e6, x >= 2,200 rows are caught
   with 95%, x >= 10,120 except with probability 1e-6; 100 private rows among a million public
   ones only with 13%. False refusals: a public feature vector equal to a once-occurring private
   one although unrelated -- never for features from a continuous distribution, except by a
   64-bit hash collision (probability at most p k 2^-64 for p public rows: 2.2e-10 per 10^6
   rows) -- but real for discrete features with rare combinations: then pass the flag. Copies
   of a private dataset whose feature vectors are all shared by several of its rows are not
   detected (their rows are indistinguishable from public data with the same values).
   The refusal depends on private data: it is for the operator (see docs/privacy.md).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa

from pcqr.pipeline.data.datasets import Dataset, Part, read_part
from pcqr.pipeline.data.arrow_types import feature_refusal
from pcqr.pipeline.data.parquet_opener import filesystem, regular_file
from pcqr.pipeline.data.user_files import parse_json
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.budget.fingerprint import PART_ROWS, Fingerprint, feature_hashes, fingerprint_dataset, normalise
from pcqr.pipeline.budget.sketch import Containment, Sketch, containment
from pcqr.pipeline.budget.ledger import FEATURES, LEGACY, ROWS, Ledger, sketch_key, stored_sketch
from pcqr.pipeline.budget.location import ledger_exists, ledger_location
from pcqr.pipeline.spelling import spelled

CHUNK_BYTES = 8 * 1024 * 1024
RARE = 1

def register(ledger: Ledger, found: Fingerprint, label: str) -> None:
    """Store the fingerprint's sketches under its identity (those already stored are kept)."""
    if found.row_sketch is not None:
        ledger.store.store_sketch(found.identity, ROWS, "", label, found.rows, found.row_sketch.to_bytes())
    if found.feature_sketch is not None and found.features:
        ledger.store.store_sketch(found.identity, FEATURES, sketch_key(found.features), label, found.rows,
                            found.feature_sketch.to_bytes())


@dataclass(frozen=True)
class Relation:
    """A registered identity a dataset overlaps (``containment`` None: a link to its old identity)."""

    identity: str
    label: str
    containment: Containment | None


def related_identities(ledger: Ledger, found: Fingerprint, files: Sequence[str], client: Any = None) -> list[Relation]:
    """Every other registered identity ``found`` overlaps (see the module docstring), and its old
    ``sha256:`` identity when the ledger has budgets or charges under it."""
    assert found.row_sketch is not None
    related: dict[str, Relation] = {}  # a server keeps each role's sketch of an identity: any related one counts
    for identity, _, label, data in ledger.store.sketches(ROWS):
        if identity != found.identity and identity not in related:
            estimate = containment(found.row_sketch, stored_sketch(data, ledger.path, identity))
            if estimate.related:
                related[identity] = Relation(identity, label, estimate)
    return [*related.values()] + [Relation(old, label, None) for old, label in _legacy_links(ledger, found, files, client)]


def _legacy_links(ledger: Ledger, found: Fingerprint, files: Sequence[str], client: Any) -> list[tuple[str, str]]:
    """(old identity, label) of the ``sha256:`` identity the ledger knows ``found``'s files by. A
    file ledger caches the link (its one user wrote it); a server ledger computes it each time, since
    a link stored by one analyst's machine could hide another identity's budget."""
    store = ledger.store
    if store.trusts_its_links:
        links = [(columns, label) for identity, columns, label, _ in store.sketches(LEGACY) if identity == found.identity]
        if links:
            return links
    known = store.identities()
    if (store.trusts_its_links and found.identity in known) or not any(i.startswith("sha256:") for i in known):
        return []
    old = legacy_identity(files, client)
    if old not in known:
        return []
    label = str((store.registration(old) or {}).get("label") or old)
    if store.trusts_its_links:
        store.store_sketch(found.identity, LEGACY, old, label, found.rows, b"")
    return [(old, label)]


def describe(related: list[Relation]) -> str:
    """The registered datasets of ``related``, each with the estimated shares in common."""
    described = []
    for r in related:
        if r.containment is None:
            described.append(f"{r.label} (the same files, under their identity of earlier pcqr versions)")
            continue
        c = r.containment
        shares = [f"{share:.0%} of {side}" for share, side in ((c.a_in_b, "these rows"), (c.b_in_a, "its rows"))
                  if share is not None]
        described.append(f"{r.label} ({' and '.join(shares)} in common, est.)")
    return "; ".join(described)


def identify(files: Sequence[str], ledger: Ledger, client: Any = None,
             registering: bool = False) -> tuple[Fingerprint, list[Relation]]:
    """(fingerprint, registered datasets it overlaps) of the dataset made of ``files``;
    ``registering`` (``pcqr budget set``, which stores the row sketch with the budget): with its row
    sketch."""
    found = fingerprint_dataset(files, client, ledger, sketches=registering)
    if not registering and ledger.store.sketch(found.identity, ROWS, "") is not None:  # registered
        found = fingerprint_dataset(files, client, ledger)
    if found.row_sketch is None:
        return found, []
    return found, related_identities(ledger, found, files, client)


def relation_note(related: list[Relation]) -> str:
    """Which registered datasets a charge also went to, and why (a part of the charge's one line)."""
    return "overlaps registered data, also charged to " + describe(related)


# --- identities of earlier versions (SHA-256 of the files' bytes) ---------------------------------

def file_sha256(file: str) -> str:
    """SHA-256 of a file's bytes, read in 8 MB chunks (runs on a worker)."""
    regular_file(file)
    fs, path = filesystem(file)
    digest = hashlib.sha256()
    try:
        with fs.open_input_stream(path) as stream:
            for chunk in iter(lambda: stream.read(CHUNK_BYTES), b""):
                digest.update(chunk)
    except OSError as exc:
        raise PcqrError(f"{file}: cannot read it to fingerprint the private dataset ({exc})") from None
    return digest.hexdigest()


def legacy_identity(files: Sequence[str], client: Any = None) -> str:
    """The identity pcqr gave a dataset before identities were of decoded rows: ``"sha256:"`` +
    SHA-256 over the sorted (file basename, SHA-256 of the file's bytes) pairs. A ledger written
    then keeps its budgets under it (:func:`related_identities` links them)."""
    names = list(dict.fromkeys(normalise(f) for f in files))
    if client is None:
        digests = [file_sha256(f) for f in names]
    else:
        digests = client.gather([client.submit(file_sha256, f, pure=False) for f in names])
    outer = hashlib.sha256()
    for basename, sha in sorted((os.path.basename(f.rstrip("/")), d) for f, d in zip(names, digests)):
        outer.update(f"{basename}\0{sha}\n".encode())
    return "sha256:" + outer.hexdigest()


# --- the misuse guard ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Candidate:
    label: str
    columns: tuple[str, ...]
    sketch: Sketch


def _numeric(kind: pa.DataType) -> bool:
    return feature_refusal(kind) is None


def _candidates(public: Dataset, ledger: str | None, own: Fingerprint | None,
                own_label: str | None) -> list[_Candidate]:
    names = {f.name for f in public.schema if _numeric(f.type)}  # only those can hold a numeric feature
    # every distinct sketch counts (a server keeps each role's: one planted cannot hide another)
    found: dict[tuple[str, str, bytes], _Candidate] = {}
    if own is not None and own.feature_sketch is not None and own.features and set(own.features) <= names:
        key = (own.identity, sketch_key(own.features), own.feature_sketch.to_bytes())
        found[key] = _Candidate(own_label or "", own.features, own.feature_sketch)
    if ledger is not None:
        with Ledger(ledger) as book:
            for identity, columns, label, data in book.store.sketches(FEATURES):
                wanted = tuple(parse_json(columns, "the ledger's sketch columns"))
                if set(wanted) <= names and (identity, columns, data) not in found:
                    found[(identity, columns, data)] = _Candidate(label, wanted, stored_sketch(data, book.path, identity))
    return list(found.values())


Found = list[list[np.ndarray]]  # per group of columns, per sketch bound: the feature hashes in its range


@dataclass(frozen=True)
class Reach:
    """What the guard needs of each public row, and all a worker is given: per group of columns, the
    bounds of the sketches over those columns. A row's hash is only of use when some sketch's bound
    admits it, so a worker returns only those (about k / n_d of the rows, n_d the private dataset's
    distinct feature vectors)."""

    groups: tuple[tuple[tuple[str, ...], tuple[int, ...]], ...]
    needed: tuple[str, ...]  # the columns the groups read

    def in_range(self, table: pa.Table) -> Found:
        """Worker (or driver): the feature hashes of ``table``'s rows each sketch bound can see (public rows)."""
        found = []
        for columns, bounds in self.groups:
            hashes = feature_hashes(table, columns)
            found.append([hashes[hashes <= np.uint64(bound)] for bound in bounds])
        return found


def _by_columns(candidates: Sequence[_Candidate]) -> dict[tuple[str, ...], list[_Candidate]]:
    """The candidates grouped by their (sorted) columns, in order of first appearance: the order of
    :attr:`Reach.groups` and of what a worker returns."""
    groups: dict[tuple[str, ...], list[_Candidate]] = {}
    for candidate in candidates:
        groups.setdefault(tuple(sorted(candidate.columns)), []).append(candidate)
    return groups


def _in_range(part: Part, reach: Reach) -> Found:
    """Worker (or driver): :meth:`Reach.in_range` of one part of a public dataset."""
    return reach.in_range(read_part(part, list(reach.needed)))


@dataclass(frozen=True)
class OverlapCheck:
    """The misuse guard for one public input (``option``): its candidate sketches, what the rows'
    pass must compute (:attr:`reach`), and the verdict on what it found (:meth:`verdict`). A pass
    that reads the input anyway (``pcqr answer``'s validation of --queries) computes the reach on
    the same read."""

    public: Dataset
    option: str
    candidates: tuple[_Candidate, ...]
    reach: Reach

    def verdict(self, per_part: Sequence[Found], allowed: bool, echo: Callable[[str], None] | None) -> None:
        """Refuse (PcqrError naming the option and the private dataset) when a public row in some
        sketch's range is a once-occurring private feature vector, unless ``allowed`` (then ``echo``
        gets one warning line). ``per_part``: :meth:`Reach.in_range` of every part (or chunk) of the input."""
        seen: dict[int, list[np.ndarray]] = {id(c): [] for c in self.candidates}
        groups = list(_by_columns(self.candidates).values())
        for found in per_part:
            for group, arrays in zip(groups, found):
                for candidate, hashes in zip(group, arrays):
                    seen[id(candidate)].append(hashes)
        for candidate in self.candidates:
            in_range = np.concatenate(seen[id(candidate)]) if seen[id(candidate)] else np.zeros(0, np.uint64)
            sketch = candidate.sketch
            hits = int(np.sum(np.isin(in_range, sketch.values[sketch.counts <= RARE])))
            if not hits:
                continue
            share = float(np.mean(np.isin(in_range, sketch.values)))
            detail = (f"{hits} of the {in_range.size} rows its overlap sketch can see are rows of the private "
                      f"dataset {candidate.label}, est. {share:.0%} of the file")
            if not allowed:
                raise PcqrError(f"{self.option} {self.public.uri}: holds private rows ({detail}); pass "
                                f"{spelled('--allow-private-overlap')} if this is intended")
            if echo is not None:
                echo(f"warning: {self.option} {self.public.uri} holds private rows ({detail}); allowed by "
                     f"{spelled('--allow-private-overlap')}")


def overlap_check(public: Dataset, option: str, ledger: str | None, own: Fingerprint | None = None,
                  own_label: str | None = None) -> OverlapCheck | None:
    """The guard for ``public`` against the ledger's feature sketches (``ledger``: its path, None when
    there is none) and ``own``'s; None when no sketch shares its columns (nothing to check)."""
    candidates = _candidates(public, ledger, own, own_label)
    if not candidates:
        return None
    groups = tuple((columns, tuple(c.sketch.bound for c in group)) for columns, group in _by_columns(candidates).items())
    needed = tuple(sorted({name for c in candidates for name in c.columns}))
    return OverlapCheck(public, option, tuple(candidates), Reach(groups, needed))


def check_public_overlap(public: Dataset, option: str, allowed: bool, ledger: str | None,
                         own: Fingerprint | None = None, own_label: str | None = None,
                         echo: Callable[[str], None] | None = None, client: Any = None) -> None:
    """Refuse (PcqrError naming ``option`` and the private dataset) a public dataset holding
    feature vectors of a registered private dataset (or of ``own``, the job's own private one),
    unless ``allowed`` (then ``echo`` gets one warning line). Reads the public file part by part,
    on ``client``'s workers when one is given (else in this process), and the ledger's sketches;
    charges nothing."""
    check = overlap_check(public, option, ledger, own, own_label)
    if check is None:
        return
    parts = public.parts(PART_ROWS)
    if client is None:
        per_part = [_in_range(part, check.reach) for part in parts]
    else:
        per_part = client.gather(client.map(_in_range, parts, reach=check.reach, pure=False))
    check.verdict(per_part, allowed, echo)


def own_fingerprint(ledger_option: str | None, private: Dataset | None, client: Any = None) -> Fingerprint | None:
    """The job's own private dataset's fingerprint over its features (on ``client``'s workers; the
    charge reuses it), for the guard; None without one."""
    if private is None:
        return None
    with Ledger(ledger_location(ledger_option)) as ledger:
        return fingerprint_dataset(private.files, client, ledger, private.features)


def guard_ledger(ledger_option: str | None) -> str | None:
    """The ledger whose feature sketches the guard reads: its path, None when there is none yet."""
    path = ledger_location(ledger_option)
    return path if ledger_exists(path) else None


def guard_public_inputs(inputs: Sequence[tuple[str, Dataset | None]], allowed: bool, ledger_option: str | None,
                        private: Dataset | None = None, client: Any = None,
                        echo: Callable[[str], None] | None = None) -> None:
    """A command's misuse guard, before its charge: every (option, public dataset) of ``inputs``
    against the ledger's feature sketches and, when the command reads one, the private dataset's
    own (fingerprinted now on ``client``'s workers over its features; the charge reuses it)."""
    own = own_fingerprint(ledger_option, private, client)
    for option, public in inputs:
        if public is not None:
            check_public_overlap(public, option, allowed, guard_ledger(ledger_option), own,
                                 private.uri if private is not None else None, echo, client)
