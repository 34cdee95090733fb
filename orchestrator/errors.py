"""The one domain exception. The CLI catches it, prints its sentence to stderr and exits with its code."""


class OrchestratorError(Exception):
    exit_code = 1


class UsageError(OrchestratorError):
    """Bad input from the user: exit code 2, as for any command-line usage error."""

    exit_code = 2
