"""ConfigError, the error of a configuration line that cannot be applied
(``line N: message``; pickles with its fields), and its two constructors:
``_err`` and ``_unsupported`` (valid iproute2 that the model does not
implement: ``not supported: 'TOKEN' (why)``)."""
from __future__ import annotations

from typing import Optional


class ConfigError(ValueError):
    """A configuration line that cannot be applied.

    ``line`` is the 1-based line number (None outside ``apply``), ``token`` the
    offending word (or None), ``message`` the text without the line prefix.
    """

    def __init__(self, message: str, line: Optional[int] = None, token: Optional[str] = None):
        self.message = message
        self.line = line
        self.token = token
        super().__init__(self.__str__())

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line is not None else self.message

    def __reduce__(self):
        return (ConfigError, (self.message, self.line, self.token))


def _err(message: str, token: Optional[str] = None) -> ConfigError:
    return ConfigError(message, None, token)


def _unsupported(token: str, why: str = "") -> ConfigError:
    return _err(f"not supported: '{token}'" + (f" ({why})" if why else ""), token)
