"""The one exception type users see: a message that names the field and the fix."""


class PrismError(Exception):
    """Bad input or a missing artifact. The CLI prints the message and exits 2."""
