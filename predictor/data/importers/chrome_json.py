"""Stream the events of a Chrome-trace JSON file (what ``torch.profiler`` exports).

A profiler trace is one JSON object whose ``traceEvents`` array holds every event; a
training job's trace can be hundreds of megabytes. :class:`TraceStream` reads it in
chunks and decodes one event at a time with the standard library's C decoder
(``json.JSONDecoder.raw_decode``), so memory stays at one chunk plus one event whatever
the file's size. The other top-level keys (``distributedInfo``, ``deviceProperties``,
...) are small and kept in :attr:`TraceStream.metadata` as they pass.

Errors are one :class:`~predictor.core.errors.PrismError` naming the file and what is wrong
with it: not JSON, truncated (the profiler was killed mid-write), not a trace (no
``traceEvents`` array), or an event that is not an object.
"""
from __future__ import annotations

import codecs
import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path

from predictor.core.errors import PrismError

_CHUNK = 1 << 22  # characters read at a time
_MAX_VALUE = 1 << 26  # an event or metadata value larger than this is not a profiler trace
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_GZIP_MAGIC = b"\x1f\x8b"


class TraceStream:
    """The events of one Chrome-trace JSON file (plain or gzip-compressed), read incrementally.

    Examples
    --------
    >>> stream = TraceStream("rank0.json")                      # doctest: +SKIP
    >>> n = sum(1 for e in stream.events() if e.get("ph") == "X")  # doctest: +SKIP
    >>> stream.metadata["distributedInfo"]["world_size"]          # doctest: +SKIP
    """

    def __init__(self, path):
        self.path = Path(path)
        self.metadata: dict = {}
        self.bytes_read = 0

    def events(self) -> Iterator[dict]:
        if self.path.is_dir():
            raise PrismError(f"{self.path}: a folder; pass the trace files in it (e.g. {self.path}/*.json)",
                             field=str(self.path))
        if not self.path.is_file():
            raise PrismError(f"{self.path}: no such trace file; pass the JSON files torch.profiler exported",
                             field=str(self.path))
        if self.path.stat().st_size == 0:
            raise PrismError(f"{self.path}: an empty file; export the trace again (prof.export_chrome_trace)",
                             field=str(self.path))
        with open(self.path, "rb") as head:
            packed = head.read(2) == _GZIP_MAGIC  # the bytes say, not the name: .json gzipped, .gz plain
        opener = gzip.open if packed else open
        try:
            with opener(self.path, "rb") as raw:  # utf-8-sig: an editor's byte-order mark is read past
                self._raw, self._decode = raw, codecs.getincrementaldecoder("utf-8-sig")("strict")
                self._buf, self._pos, self._eof = "", 0, False
                yield from self._document()
        except (gzip.BadGzipFile, EOFError, UnicodeDecodeError) as exc:  # a damaged or truncated file
            raise PrismError(f"{self.path}: unreadable ({type(exc).__name__}: {exc}); pass the trace file "
                             f"torch.profiler exported, whole (.json or .json.gz)", field=str(self.path)) from None

    # -- the document: { "key": value, ..., "traceEvents": [ {event}, ... ], ... } --------
    def _document(self) -> Iterator[dict]:
        if self._peek() != "{":
            what = "a JSON array (a bare list of events)" if self._peek() == "[" else "not a JSON object"
            self._fail(f"{what}; a PyTorch profiler trace is an object with a traceEvents array")
        self._pos += 1
        seen_events, first = False, True
        while True:
            if self._peek() == "}":
                break
            if not first:
                self._expect(",")
            first = False
            key = self._value("a key")
            if not isinstance(key, str):
                self._fail("an object key is not a string")
            self._expect(":")
            if key == "traceEvents":
                if self._peek() != "[":
                    self._fail("traceEvents is not an array")
                self._pos += 1
                yield from self._array()
                seen_events = True
            else:
                self.metadata[key] = self._value(f"the value of {key!r}")
        if not seen_events:
            keys = ", ".join(sorted(self.metadata)[:8]) or "none"
            raise PrismError(f"{self.path}: JSON without a traceEvents array (top-level keys: {keys}); "
                             f"not a PyTorch profiler trace. Export one with prof.export_chrome_trace(PATH)",
                             field=str(self.path))

    def _array(self) -> Iterator[dict]:
        first = True
        while True:
            if self._peek() == "]":
                self._pos += 1
                return
            if not first:
                self._expect(",")
            event = self._value("an event")
            if not isinstance(event, dict):
                self._fail(f"traceEvents holds a {type(event).__name__}, not an event object")
            first = False
            yield event

    # -- low level ----------------------------------------------------------------------
    def _fill(self) -> bool:
        """Read one more chunk; False at the end of the file."""
        if self._eof:
            return False
        data = self._raw.read(_CHUNK)
        self.bytes_read += len(data)
        try:
            text = self._decode.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            # exc.object is the decoder's held-back bytes and this chunk: the last bytes read
            at = self.bytes_read - len(exc.object) + exc.start
            raise PrismError(f"{self.path}: not UTF-8 text ({exc.reason} at byte {at:,}); "
                             f"not a PyTorch profiler trace", field=str(self.path)) from None
        except (OSError, EOFError) as exc:  # a broken .gz
            raise PrismError(f"{self.path}: cannot be decompressed ({exc}); it is truncated or corrupt",
                             field=str(self.path)) from None
        if not data:
            self._eof = True
        if self._pos > len(self._buf) // 2:
            self._buf, self._pos = self._buf[self._pos:], 0
        self._buf += text
        return bool(data)

    def _peek(self) -> str:
        """The next non-blank character (reading more as needed); '' at the end."""
        while True:
            self._pos = _WS.match(self._buf, self._pos).end()
            if self._pos < len(self._buf):
                return self._buf[self._pos]
            if not self._fill():
                self._fail("truncated: the file ends inside the JSON document (was the profiler stopped "
                           "while writing?)")

    def _expect(self, char: str) -> None:
        c = self._peek()
        if c != char:
            self._fail(f"expected {char!r} but found {c!r}")
        self._pos += 1

    def _value(self, what: str):
        self._peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as exc:
                # Incomplete at the end of the buffer: read more and decode again.
                if len(self._buf) - self._pos > _MAX_VALUE:
                    self._fail(f"{what} longer than {_MAX_VALUE >> 20} MB ({exc.msg})")
                if self._fill():
                    continue
                if exc.pos >= len(self._buf) - 1 or "Unterminated" in exc.msg:
                    self._fail(f"truncated: the file ends inside {what}")
                self._fail(f"not valid JSON in {what}: {exc.msg}", exc.pos)
            if end == len(self._buf) and not self._eof and self._fill():
                continue  # a number may go on in the next chunk
            self._pos = end
            return value

    def _fail(self, message: str, pos: int | None = None):
        pos = self._pos if pos is None else pos
        offset = self.bytes_read - len(self._buf.encode("utf-8", "replace")) + len(
            self._buf[:pos].encode("utf-8", "replace"))
        raise PrismError(f"{self.path}: {message} (near byte {max(offset, 0):,})", field=str(self.path))
