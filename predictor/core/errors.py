"""The one exception type users see: a message that names the field and the fix."""
from __future__ import annotations


class PrismError(Exception):
    """Bad input or a missing artifact. The CLI prints the message and exits 2.

    ``field`` is what the user has to fix, kept apart from the prose so that nothing
    parses message text: a setting's dotted key (``parallel.tp``, ``gpus``), a column of
    a table, or the path of a file. None where no single field is at fault.
    """

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.field = field
