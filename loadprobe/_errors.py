"""The one exception type that carries a message meant for the user."""


class LoadprobeError(Exception):
    """Bad input or environment, explained in one line: what, where, expected what, what to do.

    The CLI prints it without a traceback and exits with status 2.
    """
