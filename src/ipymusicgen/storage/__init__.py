"""The storage layer: the one place that knows the journal is an SQLite file (every SQL statement lives here).

- `database`: `Database`, one journal file and its concerns (journal, library, batches, extras), each opened on
  first use and closed by the database that opened it: what the layers above are given, never a path;
  `errors`: the engine's failures by name (`StorageError`), so no layer above names SQLite;
- `shared_connection`: one connection per journal file per process, shared by every store over it, with its lock
  (one of the three modules allowed state of their own);
- `journal_file`: opening the file (recognised, private, WAL, busy timeout, damage checks) and write transactions;
- `migrations`: numbered schema steps (`mNNN_` functions), applied once, in order (`PRAGMA user_version`);
- `journal`: paid attempts and tasks; `batches`: batch rows and runs; `library` and `songs`: the library's
  writes and reads; `extras`: paid extras of a song;
- `owner`: which process owns an attempt (alive or not);
- `ledger*`: the team gateway's ledger (SQLite or PostgreSQL), apart from the journal.
"""
