"""The listening lab: what people learn by listening (ratings from pairwise votes, for now)."""
