"""The owner of one journal file's world (`Workspace`), the client wiring it gives its clients, and the session:
the one process global (the current workspace, the overrides, the embedded sandbox)."""
