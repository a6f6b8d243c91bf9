"""Errors meant for users: the CLI prints them in one line, without a stack trace."""


class ServetuneError(Exception):
    """Bad input or an impossible request, with a message that says what and where."""
