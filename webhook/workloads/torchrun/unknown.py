"""How the parser marks what it cannot know, in text and in the resulting facts."""

from __future__ import annotations

# Stands for a part of a word whose text we cannot know. NUL cannot occur in a real argv.
UNK = "\x00"

# Markers in TorchrunSpec.unresolved besides field names:
INVALID = "invalid"  # torch would refuse this launch line
ARGV = "argv"  # part of the launch line itself is unknown
LIMIT = "limit"  # a cap of limits.py was reached: TorchrunSpec.limit says which
