"""Old import path kept for users: the journal lives in `ipymusicgen.storage.journal`."""

from .storage.journal import *  # noqa: F403
from .storage.journal import Attempt, Journal, JournalEntry, JournalUnavailableError, JournalWriteWarning, Owner

__all__ = ["Attempt", "Journal", "JournalEntry", "JournalUnavailableError", "JournalWriteWarning", "Owner"]
