"""A job spec: the YAML file of ``pcqr run`` and ``pcqr submit``, read and turned into a command line.

A spec maps a command's option names (``queries-max`` or ``queries_max``) to values of the option's
type; ``job:`` names the command. :func:`load_spec` reads it strictly (through
:mod:`pcqr.pipeline.data.user_files`), :func:`apply_overrides` lays the operator's ``--set KEY=VALUE``
over it, and :func:`command_line` checks every key against the command's options (described by
:class:`SpecOption`, so this module needs no command-line library) and returns the argument list.
Nothing here runs the job.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal, Mapping

from pcqr.pipeline.data.user_files import CONFIG_LIMIT, parse_yaml, read_yaml
from pcqr.pipeline.errors import PcqrError

#: Keys that name a file or directory: a relative value is relative to the spec file's folder.
PATH_KEYS = frozenset({"private", "public", "queries", "truth", "state", "log", "out", "into", "new-log", "model"})
#: Keys only the operator sets (on the command line: --cluster, --set): a spec may come from someone
#: else, and these choose which code may run (the cluster's learner allow-list, a `spec` backend's
#: class) and which budget is charged.
OPERATOR_KEYS = frozenset({"cluster", "ledger"})
#: The value types a spec knows: an option of any other type (a path, a string) takes text.
Kind = Literal["int", "float", "choice", "text"]


@dataclass(frozen=True)
class SpecOption:
    """What a spec key may hold: the value type of the command's option of that name
    (``int``, ``float``, one of ``choices``, or ``text``), whether it is a flag (``true``/``false``)
    and whether it is repeatable (the one kind of option that takes a list)."""

    kind: Kind = "text"
    flag: bool = False
    multiple: bool = False
    choices: tuple[Any, ...] = ()


def load_spec(path: str) -> dict[str, Any]:
    """The spec file's mapping, read strictly (pcqr.pipeline.data.user_files: a regular file, UTF-8,
    no key given twice: ``epsilon: 1`` then ``epsilon: 650`` is refused, not run at 650)."""
    spec = read_yaml(path, "the job spec", CONFIG_LIMIT)
    if not isinstance(spec, dict):
        raise PcqrError(f"{path}: a spec is a mapping of option names to values")
    return spec


def apply_overrides(spec: dict[str, Any], overrides: tuple[str, ...]) -> set[str]:
    """Lay the operator's ``--set KEY=VALUE`` items over ``spec`` (in place; a value is YAML, a path is
    relative to the current directory); the option names the operator set."""
    operator: set[str] = set()
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise PcqrError(f"--set {item!r}: expected KEY=VALUE")
        name = key.replace("_", "-")
        if name in operator:
            raise PcqrError(f"--set {key}: given twice")
        for same in [k for k in spec if str(k).replace("_", "-") == name]:
            del spec[same]  # the override replaces the spec's key however it is spelled
        spec[key] = parse_yaml(value, f"--set {item!r}: the value is not valid YAML")
        operator.add(name)
        if name in PATH_KEYS and isinstance(spec[key], str) and "://" not in spec[key]:
            spec[key] = os.path.abspath(os.path.expanduser(spec[key]))  # typed here: relative to this directory
    return operator


def command_line(spec: Mapping[Any, Any], options: Mapping[str, SpecOption], job: str | None, source: str,
                 base: str | None = None, operator: frozenset[str] = frozenset()) -> list[str]:
    """Turn a spec's keys into job ``job``'s argument list, refusing unknown keys and values whose
    type is not the option's (a list only for a repeatable option).

    ``options``: the job's options by name (without the leading dashes).
    ``base``: the spec file's folder, against which relative paths resolve (None: leave them).
    ``operator``: keys that came from the operator's command line, allowed among OPERATOR_KEYS.
    """
    args: list[str] = []
    names: dict[str, Any] = {}
    for key, value in spec.items():
        name = str(key).replace("_", "-")
        if name in names:
            raise PcqrError(f"{source}: keys {names[name]!r} and {key!r} are the same option: give it once")
        names[name] = key
        option = options.get(name)
        if option is None:
            known = ", ".join(sorted(options))
            raise PcqrError(f"{source}: unknown key {key!r} for job {job!r} (known: {known})")
        if name in OPERATOR_KEYS and name not in operator:
            raise PcqrError(f"{source}: key {key!r} cannot be set in a spec (it chooses the cluster's code or the "
                            f"budget): pass --{name} on the command line")
        if option.flag:
            if not isinstance(value, bool):
                raise PcqrError(f"{source}: key {key!r} is a flag: use true or false")
            if value:
                args.append(f"--{name}")
            continue
        if isinstance(value, list):
            if not option.multiple:
                raise PcqrError(f"{source}: key {key!r} takes one value, not a list")
            items = value
        else:
            items = [value]
        for item in items:
            text = _scalar(item, option, f"{source}: key {key!r}")
            if name in PATH_KEYS and base is not None and "://" not in text and not os.path.isabs(text):
                text = os.path.normpath(os.path.join(base, os.path.expanduser(text)))
            args += [f"--{name}", text]
    return args


def _scalar(value: Any, option: SpecOption, where: str) -> str:
    """One YAML value as the option's text, if it has the option's type."""
    if value is None:
        raise PcqrError(f"{where} has no value")
    if isinstance(value, (list, dict)):
        raise PcqrError(f"{where}: expected one value, got a {'list' if isinstance(value, list) else 'mapping'}")
    if option.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise PcqrError(f"{where}: expected an integer, got {value!r}")
    elif option.kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PcqrError(f"{where}: expected a number, got {value!r}")
    elif option.kind == "choice":
        if not isinstance(value, str) or value not in option.choices:
            raise PcqrError(f"{where}: expected one of {', '.join(map(str, option.choices))}, got {value!r}")
    elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise PcqrError(f"{where}: expected text, got {value!r}")
    return str(value)
