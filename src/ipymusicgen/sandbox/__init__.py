"""Local simulator of the music service."""
