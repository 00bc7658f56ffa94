"""pgsched."""
