"""The viastack coordination bus from Python (standard library only).

- `term`: the term model (tagged tuples), its text form and the sharing-preserving binary
  term streams of docs/WIRE.md ("Bus terms");
- `text`: the term text syntax parsed (`parse_term`), the grammar of the Rust and Java parsers;
- `wire`: the bus frames of docs/WIRE.md ("Bus frames");
- `client`: a tool: connect, answer evaluations, send events, put and get values by value or
  by reference (windowed fetch from the owner, at most once), FIN frees.
"""

from .term import (  # noqa: F401
    TermError, appl, blob, decode_term, encode_term, integer, lst, placeholder, real, ref,
    string, to_text, var,
)
from .text import TermParseError, parse_term  # noqa: F401
from .wire import FrameError, decode_frame, encode_frame  # noqa: F401
from .client import OwnerUnverified, Tool, TransferFailed  # noqa: F401
