"""`trainguard serve` imports its policy options from here; they live in webhook.cli._file_engine.

This module goes once serve.py imports them from there.
"""

from webhook.cli._file_engine import add_policy_args as add_policy_args
