"""``prism <verb> --show-config``: the composed configuration as YAML, with the comments
of ``conf/`` that explain each key kept beside it.

Every value is the composed one (overrides applied, a group file's values over those of
the file it extends). Each group starts with the file it came from and that file's
opening comment; each key carries the comment written beside it (or above it) in the
last file that comments it; a key set on the command line is marked ``<- key=value``.
Comments are read from the YAML text line by line: conf/ writes one key per line,
nested by indentation, a comment after ``#`` and continued on the next lines at the
same column.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from omegaconf import OmegaConf
from omegaconf._utils import get_omega_conf_dumper

from predictor.app.config import Composition
from predictor.core.profiles import CONF_DIR

_KEY = re.compile(r"(\s*)([A-Za-z_][\w.-]*)\s*:(\s|$)")
_COMMENT_COLUMN = 40  # where comments start, past shorter lines


@dataclass
class FileComments:
    """The comments of one YAML file: its opening block, and per key path those written
    above the key and beside it."""

    header: list[str] = field(default_factory=list)
    above: dict[tuple[str, ...], list[str]] = field(default_factory=dict)
    beside: dict[tuple[str, ...], list[str]] = field(default_factory=dict)


def _comment_start(line: str) -> int | None:
    """The column of the ``#`` that starts a comment in ``line``, outside quotes."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"" and (i == 0 or line[i - 1] in " [{,:"):  # a quoted scalar starts (not "it's")
            quote = char
        elif char == "#" and (i == 0 or line[i - 1] in " \t"):
            return i
    return None


def read_comments(path: Path) -> FileComments:
    comments = FileComments()
    stack: list[tuple[int, str]] = []  # (indent, key) of the keys enclosing the current line
    pending: list[str] = []  # whole-line comments waiting for the key below them
    beside_column, last = None, None  # where the previous key's comment started, and its path
    seen_key = False
    for line in path.read_text().splitlines():
        start = _comment_start(line)
        if not line.strip():
            beside_column = None
            continue
        if start is not None and not line[:start].strip():  # a whole-line comment
            if last is not None and start == beside_column:
                comments.beside[last].append(line[start:])  # the previous key's comment goes on
            else:
                pending.append(line[start:])
                beside_column = None
            continue
        match = _KEY.match(line)
        if not match:  # a list item or a flow collection's next line
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match.group(2)))
        last = tuple(key for _, key in stack)
        if pending:
            if seen_key:
                comments.above[last] = pending
            else:
                comments.header = pending
            pending = []
        seen_key = True
        beside_column = start
        comments.beside[last] = [line[start:]] if start is not None else []
    return comments


def _leaf(key: str, value) -> str:
    """``key: value`` as OmegaConf writes YAML, collections of scalars on one line."""
    text = yaml.dump({key: value}, Dumper=get_omega_conf_dumper(), default_flow_style=True,
                     width=float("inf"), allow_unicode=True, sort_keys=False).strip()
    return text[1:-1]  # the one-key mapping's braces


def _lines(node: dict, path: tuple[str, ...], indent: str):
    """(key path, text) of each line of ``node`` as YAML, nested mappings as blocks."""
    for key, value in node.items():
        if isinstance(value, dict) and value:
            yield (*path, key), f"{indent}{key}:"
            yield from _lines(value, (*path, key), indent + "  ")
        else:
            yield (*path, key), indent + _leaf(key, value)


def _annotate(text: str, notes: list[str]) -> list[str]:
    """``text`` with ``notes`` (comments) beside it, continued below at the same column."""
    if not notes:
        return [text]
    column = max(len(text) + 2, _COMMENT_COLUMN)
    return [f"{text:<{column}}{notes[0]}", *(f"{'':<{column}}{note}" for note in notes[1:])]


def _explained(key: tuple[str, ...], files: list[FileComments]) -> tuple[list[str], list[str]]:
    """The comments above and beside ``key`` in the last of ``files`` that comments it (a
    file that only changes a value keeps the comment of the file it extends)."""
    for comments in reversed(files):
        if comments.beside.get(key) or key in comments.above:
            return comments.above.get(key, []), comments.beside.get(key, [])
    return [], []


def show_config(composition: Composition) -> str:
    """The composed configuration of ``composition`` as commented YAML."""
    cfg = OmegaConf.to_container(composition.cfg, resolve=False)
    marks = {tuple(s.key.split(".")): f"# <- {s.text}" for s in composition.overrides}
    out = []
    for group, paths in composition.files.items():  # group None: the root, config.yaml's own keys
        files = [read_comments(path) for path in paths]
        chosen = f"  <- {group}={composition.choices[group]}" if group in composition.choices else ""
        named = ", then ".join(str(path.relative_to(CONF_DIR.parent)) for path in paths)
        out += ["", f"# {group + ': ' if group else ''}{named}{chosen}", *files[-1].header]
        for key in [group] if group else [k for k in cfg if k not in composition.files]:
            for path, text in _lines({key: cfg[key]}, (), ""):
                above, beside = _explained(path[1:] if group else path, files)  # paths inside the files
                indent = text[:len(text) - len(text.lstrip())]
                out += [indent + note for note in above]
                mark = next((m for marked, m in marks.items() if path[:len(marked)] == marked), None)
                if mark:  # the command line's value, then what the key is
                    beside = [mark + "".join(f" | {note.lstrip('#').strip()}" for note in beside[:1]), *beside[1:]]
                out += _annotate(text, beside)
    return "\n".join(out).lstrip("\n") + "\n"
