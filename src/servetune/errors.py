"""Errors meant for users: the CLI prints them in one line, without a stack trace."""


class ServetuneError(Exception):
    """Bad input or an impossible request, with a message that says what and where."""


class NoResult(ServetuneError):
    """The input was good and the command ran, but there is no result (a server that does not answer):
    one line, exit 1."""
