"""The one domain exception. The CLI catches it, prints its sentence to stderr and exits with its code."""

import errno


class OrchestratorError(Exception):
    exit_code = 1


class UsageError(OrchestratorError):
    """Bad input from the user: exit code 2, as for any command-line usage error."""

    exit_code = 2


# The errors of a file system that has no room left: the user frees space (or asks for quota), nothing is wrong
# with the input.
DISK_FULL = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}


def oserror_reason(exc: OSError) -> str:
    """An OSError (from writing, mostly) as part of a sentence: why, and where when the error names the file.
    pyarrow's errors name no file and carry a long message; the errno says enough."""
    why = DISK_FULL.get(exc.errno) or exc.strerror or str(exc)
    return f"{why} ({exc.filename})" if exc.filename else why


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL
